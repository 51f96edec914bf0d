// The prefill cores behind matmul() (matmul/matmul.h): weight panels unpacked
// once and multiplied against every token of the batch, tiles of rows x
// tokens held in registers. Internal to the model layer; tests call them to
// check each core against a float64 reference.
#pragma once
#include <cstdint>

#include "matmul/matmul.h"

namespace tkv {

// Tiled f32 core for every weight type: a panel of rows is unpacked to f32
// (weight_blocks.h) in chunks of 256 columns, then kMR vectors of rows x kNT
// tokens of FMAs per step (Highway, every compiled target).
void matmul_tiled_f32(const Matrix& w, const float* x, int n_tok, float* y, int threads);

// Int8-activation core (matmul_int8.cpp): activations quantized per block of
// 32 (Q8_0-like), weights unpacked to u8 codes with a scale and offset per 32
// (unpack_u8; Q6_K: a scale per 16, unpack_q6k_u8), exact integer dot
// products (AVX512-VNNI vpdpbusd, or AVX2 vpmaddubsw + vpmaddwd: the same
// sums, the same bits), scaled once per block. False (nothing written) when
// the type is not one of them or the CPU / the forced SIMD target has
// neither kernel.
bool matmul_int8(const Matrix& w, const float* x, int n_tok, float* y, int threads);
bool int8_core_available();
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool int8_supports(uint32_t type);
// BF16 weights with AVX512-BF16 vdpbf16ps (matmul_bf16.cpp): activations
// rounded to bf16 (nearest even), pairs of products per f32 lane, panels of
// 32 rows x tiles of 8 tokens. False (nothing written) for other types or
// without the instruction (or the AVX-512 target).
bool matmul_bf16(const Matrix& w, const float* x, int n_tok, float* y, int threads);
bool bf16_dot_available();
// F16 weights on int16 products (matmul_int16.cpp): weights and
// activations quantized per block of 32 columns to |q| <= 8191 with one
// f32 scale each (quantize_block_i16), exact int32 block dots (AVX512-VNNI
// vpdpwssd, 2x the f32 FMA's products per instruction), then
// f = fma(float(dot), d_w d_x, f) per block; each value within half its
// scale, 2^-14 of its block's largest. False (nothing written) for other
// types, cols not a multiple of 32, or without AVX512-VNNI (or the AVX-512
// target).
bool matmul_int16(const Matrix& w, const float* x, int n_tok, float* y, int threads);
bool int16_core_available();
// Its scalar specification: the same quantization, the same operations in
// the same order, so the kernel matches it bit for bit.
void matmul_int16_ref(const Matrix& w, const float* x, int n_tok, float* y);
// The codes' bounds: 32 products of the two fit an int32 (32 * 8191^2 <
// 2^31). Measured on ref-5m F16 (WikiText-2, -c 512, 40 chunks, KLD against
// the f32 tiles): 8191 / 8191 4.4e-8, weights 4095 / activations 16383
// 5.6e-8, 16383 / 4095 8.9e-8, 2047 / 32767 1.6e-7; activations rounded to
// f16 (llama.cpp's F16 product) 9.7e-8 (RESULTS §48).
constexpr int kInt16MaxW = 8191, kInt16MaxX = 8191;
// One block of n values: d = max|x| / qmax, q = round(x / d) (x times
// the f32 1 / d, half to even). A block with NaN or infinity: d NaN, q 0;
// one whose largest |x| is below 2^-100: d 0, q 0. int16_block_scale is its
// scale step (returns 1 / d, or 0 where q is 0), shared with the SIMD code.
void quantize_block_i16(const float* x, int n, int qmax, int16_t* q, float* d);
float int16_block_scale(float amax, bool non_finite, int qmax, float* d);
// F16 and BF16 weights on Intel AMX (matmul_amx.cpp): weights and
// activations split into bf16 halves, TDPBF16PS tile products; each product
// within 2^-15 of w x (BF16 weights: 2^-16) before the f32 sums. False
// (nothing written) for other types or where amx_usable() is false.
bool matmul_amx(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// The fewest tokens for which matmul() takes matmul_amx: each call converts
// every weight to bf16 halves first (F16: ~0.6 ns a weight), which fewer
// tokens do not repay. Measured with tkv_bench matmul/F16|BF16 at 2048 x
// 2048, one thread: F16 8 tokens AMX 4.2-4.5 ms against the f32 tiles'
// 1.75, 32: 4.4-4.8 against 3.9-4.3, 64: 4.7-6.5 against 6.3-7.1. BF16
// takes AMX from any count: 8 tokens 1.9-2.3 ms against 9.0 for the
// vdpbf16ps core it replaces there (its panels re-laid per value) and 1.65
// for the f32 tiles; 32: 1.7-2.0 against 4.0-4.1.
int amx_min_tokens(uint32_t type);
// AVX512-VNNI usable now (the CPU has it and dispatch may pick an AVX-512
// target): the decode kernels below need it.
bool vnni_available();
// The AVX2 decode kernels usable now (AVX2 + FMA + F16C, and dispatch may
// pick the AVX2 target or wider): Q4_K/Q5_K/Q6_K where VNNI is absent.
bool avx2_decode_available();
// Decode (one token) with int8 activations: Q8_0, MXFP4 and Q4_0 by
// decode_q8_rows (below), Q4_K/Q5_K/Q6_K by decode_kquants. False (nothing
// written) for other types or without the kernel.
bool matmul_int8_decode(const Matrix& w, const float* x, float* y, int threads);
// The same one-token kernels as a share of a thread team (matmul_many):
// called by every thread of an enclosing parallel region (or by one thread
// alone, outside any), each prepares the activations itself (no serial step
// while the others wait) and takes its static share of the rows with no
// barrier at the end (`omp for nowait`), so several matrices share one
// region. Bit for bit matmul_int8_decode's results. False (nothing done)
// where matmul_int8_decode would return false; *_supported tells first.
bool int8_decode_team_supported(const Matrix& w);
void int8_decode_team(const Matrix& w, const float* x, float* y);
void decode_kquants_team(const Matrix& w, const float* x, float* y);
void decode_q8_rows_team(const Matrix& w, const float* x, float* y);
// Q4_K, Q5_K, Q6_K decode (decode_kquants.cpp) for one token or a group:
// activations per 256 (Q8_K-like), integer sub-block scales and mins, one
// float step per super-block; each token's bits its own alone. AVX512-VNNI
// where vnni_available(), else AVX2 (avx2_decode_available()). False for
// other types or without either.
bool decode_kquants(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// Its scalar specification, in float64 (cols a multiple of 256): per row,
// token and super-block b the exact integers I_b = Σ_j sc_j Σ_{c in j} u_c q_c
// (Q6_K: u_c - 32, signed scales) and M_b = Σ_j m_j Σ_{c in j} q_c (Q4_K/Q5_K
// mins), y = Σ_b (I_b d_b - M_b dmin_b) dx_b with the activations quantized
// per 256 by quantize_block_q8; mag (optional) = Σ_b (Σ|sc u q| |d_b| +
// Σ_j m_j |Σq| |dmin_b|) dx_b, the size of what the kernel adds in f32, whose
// rounding alone separates the two: |y_kernel - y| <= (2 nb + 16) 2^-24 mag.
void decode_kquants_ref(const Matrix& w, const float* x, int n_tok, double* y, double* mag);
// Q8_0, Q4_0 and MXFP4 decode with rows in lanes (decode_q8_rows.cpp) for one
// token or a group: 16 rows per vector (AVX2: 8), each block's int32 dots completed
// before one scale step, so scales cost 3 operations per 512 weights per
// token; every token's bits are decode_q8_rows_ref's for it alone. MXFP4's
// codes are looked up in place (vpshufb on the nibbles, E2M1 doubled + 12 as
// unsigned operands), its E8M0 byte made 2^(e - 128) by integer shifts.
// False for other types or without AVX512-VNNI or AVX2.
bool decode_q8_rows(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// On a CPU without AVX512-VNNI (avx2_decode_available()), decode_q8_rows
// runs 8 rows in the lanes of an AVX2 kernel with the same specification;
// true where that kernel runs for this type.
bool decode_q8_rows_avx2_used(uint32_t type);
// True for the types the one-token and group decode send to decode_q8_rows:
// Q8_0, MXFP4, and Q4_0 where AVX512-VNNI or the AVX2 kernel runs.
bool decode_q8_rows_takes(uint32_t type);
// Its scalar specification: per row and token, f = fma(float(dot_b), d_w(b) * d_x(b), f)
// over the blocks in order, dot_b the exact integer dot of the block's codes
// (MXFP4: the values kMxfp4[code], d_w = mxfp4_scale(e); Q4_0: code - 8).
void decode_q8_rows_ref(const Matrix& w, const float* x, int n_tok, float* y);
// One token of F16 weights (matmul() under kAuto, matmul_many,
// matmul_tokens): the activations rounded to f16 once, as llama.cpp rounds
// them for F16 (its vec_dot_type), after a power-of-two scale that puts
// max|x| in [2^14, 2^15), so that no value overflows and each is within
// 2^-11 of itself; then f16 x f16 products in f32. Half the activation bytes
// of the f32 row: 1-thread decode is bound by the loads beside the weight
// stream (RESULTS §49). False (nothing written) for other types or when x
// holds NaN or infinity (the f32 row core then runs).
bool matmul_f16_decode(const Matrix& w, const float* x, float* y, int threads);
// The decode kernel for n_tok tokens at once (matmul_tokens): each row is
// read from memory once and dotted with every token's activations by the
// one-token code, so each token's result is bit-identical to
// matmul_int8_decode on it alone.
bool matmul_int8_decode_tokens(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// The scalar specification of matmul_int8: the same operations in the same
// order (fmaf per block), so the SIMD kernel matches it bit for bit.
void matmul_int8_ref(const Matrix& w, const float* x, int n_tok, float* y);

// One block of n activations: d = max|x| / 127, q = round(x / d) (half to
// even) in -127..127; returns Σ q. The scalar specification of every
// activation quantizer (blocks of 32 below, of 256 for K-quant decode).
int32_t quantize_block_q8(const float* x, int n, int8_t* q, float* d);
// Activation quantization of one row (cols a multiple of 32): per block b,
// d[b] = max|x| / 127, q = round(x / d) in -127..127, s[b] = d[b] * Σ q.
void quantize_activations_q8(const float* x, int64_t cols, int8_t* q, float* d, float* s);
// The same with Highway SIMD (the dispatched target), bit for bit.
void quantize_activations_q8_simd(const float* x, int64_t cols, int8_t* q, float* d, float* s);

}  // namespace tkv
