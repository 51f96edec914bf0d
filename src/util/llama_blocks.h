// llama.cpp's Q8_0 and Q4_0 block quantizers (blocks of 32 values: an f16
// scale, then 32 int8 / 16 bytes of 4-bit codes), bit for bit as ggml's
// reference quantize_row_q8_0_ref / q4_0_ref. One copy for both users: the
// KV codec's q8_0/q4_0 rows (codec/, whose scalar kernels are the spec the
// SIMD ones match) and the GGUF weight writer (gguf/quantize_weights).
#pragma once
#include <cstdint>

namespace tkv {

void llama_quantize_q8_0(const float* x, int nblocks, uint8_t* out);  // 34 bytes a block
void llama_quantize_q4_0(const float* x, int nblocks, uint8_t* out);  // 18 bytes a block

}  // namespace tkv
