// The per-type part of the matrix multiply: unpacking ggml weight blocks
// (llama.cpp ggml-quants.c layouts), as floats or as unsigned 8-bit codes
// with a scale and an offset. Scalar code; the SIMD cores call it once per
// weight panel and reuse the result across every token of a batch.
#pragma once
#include <cstdint>

namespace tkv {

// Values per block of a ggml type (1 for F32/F16/BF16, 32, or 256 for K-quants)
// and the bytes of one block; 0 for an unsupported type.
int weight_block_values(uint32_t type);
int weight_block_bytes(uint32_t type);

// n values of a row starting at value k0 (k0 and n whole blocks, or any for
// F32/F16/BF16) as floats.
void unpack_f32(uint32_t type, const uint8_t* row, int64_t k0, int64_t n, float* out);

// Whether unpack_u8 handles the type: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, MXFP4 (Q6_K has two scales per 32 values: unpack_q6k_u8).

// MXFP4 (ggml type 39, gpt-oss's expert weights): blocks of 32 values, one
// E8M0 exponent byte e then 16 bytes of 4-bit E2M1 codes (value j in the low
// nibble of byte j, value j + 16 in the high nibble); value = kMxfp4[code] *
// 2^(e - 128), kMxfp4 holding E2M1's values doubled (ggml's kvalues_mxfp4,
// GGML_E8M0_TO_FP32_HALF).
constexpr uint32_t kMxfp4Type = 39;
extern const int8_t kMxfp4[16];
float mxfp4_scale(uint8_t e);  // 2^(e - 128), exact (subnormal for e < 2)
bool has_u8_unpack(uint32_t type);
// The 32 values of block j of a row (sub-block j for K-quants) as codes
// u in 0..255 with value = d * u + m in exact arithmetic, d and m being the
// floats unpack_f32 multiplies by (Q8_0: u = q + 128, m = -128 d; Q4_0:
// u = q, m = -8 d; Q4_K: d = d_super * scale, m = -(dmin * min); ...).
void unpack_u8(uint32_t type, const uint8_t* row, int64_t j, uint8_t* u, float* d, float* m);
// unpack_u8's d and m alone (for kernels that expand the codes themselves).
void unpack_u8_scales(uint32_t type, const uint8_t* row, int64_t j, float* d, float* m);
// Q4_K and Q5_K (types 12, 13): unpack_u8_scales of the 8 sub-blocks of the
// super-block at blk, d[s] and m[s] (the same floats, one decode of the
// super-block's scale bytes and halves instead of 8).
void unpack_k4_scales8(const uint8_t* blk, float* d, float* m);
// Q4_0 and Q8_0 (types 2 and 8): a block is its f16 scale d, then the codes,
// and unpack_u8's m is this multiple of d (codes q + 8 and q + 128); 0 for
// other types. Inline, so that pack loops decode these scales themselves
// (matmul_int8.cpp: a call per block cost 4.6 % of a 512-token product).
constexpr float u8_offset_per_scale(uint32_t type) { return type == 2 ? -8.0f : type == 8 ? -128.0f : 0.0f; }
// llama.cpp's get_scale_min_k4: the 6-bit scale and min of sub-block j of a
// Q4_K / Q5_K super-block, from its 12 packed bytes q.
void scale_min_k4(int j, const uint8_t* q, int& d, int& m);
// Q6_K's sub-block j of 32 values as codes u in 0..63 with
// value = d2[l / 16] * (u - 32) in exact arithmetic (one scale per 16).
void unpack_q6k_u8(const uint8_t* row, int64_t j, uint8_t* u, float* d2);

}  // namespace tkv
