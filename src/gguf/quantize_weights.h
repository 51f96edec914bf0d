// Writers of ggml weight blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K) for gen-model and tests. Simple min/max fits, not llama.cpp's
// error-minimising search: valid blocks in ggml's layout, decoded exactly by
// dequantize_row.
#pragma once
#include <cstdint>
#include <string>

namespace tkv {

// Quantizes one row of `cols` floats (a multiple of the type's block) into
// `out`; returns false for an unsupported type.
bool quantize_weight_row(const std::string& type, const float* x, int64_t cols, uint8_t* out);

}  // namespace tkv
