// matmul/: the numeric kernels over weights — matrix-vector and matrix-matrix
// products for every weight type, prefill and decode. It sees util/ and the
// block layouts of gguf/ only; never cache/, model/ or above.
//
// Weight matrices straight from GGUF (F32, F16, BF16, Q8_0, Q4_0) and the
// matrix-vector products of the forward pass (Highway SIMD, OpenMP threads).
// A weight with GGUF dims [cols, rows] maps cols inputs to rows outputs.
#pragma once
#include <cstdint>
#include <string>

#include "gguf/gguf.h"
#include "util/status.h"

namespace tkv {

struct Matrix {
  const uint8_t* data = nullptr;
  uint32_t type = 0;     // ggml type id
  int64_t rows = 0, cols = 0;
  size_t row_bytes = 0;
};

// Checks the type is supported and the dims are [cols, rows] (rows = 1 for vectors).
Expected<Matrix> matrix_from(const gguf::Tensor& t, const std::string& path);

// The matrix-multiply cores (docs/ARCHITECTURE.md, "Matrix multiply"):
// kRows: the row-streaming dot (one weight row against 4 tokens at a time;
//   decode's weight-streaming path, and the whole of the old core);
// kTiled: weight panels unpacked to f32 and multiplied in register tiles of
//   rows x tokens (every weight type, every SIMD target);
// kInt8: activations quantized per block of 32, integer dot products
//   (AVX512-VNNI, else AVX2) for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
//   Q6_K; F16 and BF16 weights on AMX tiles (weights and activations split
//   into bf16 halves, matmul_amx.cpp), else F16 on int16 codes with
//   AVX512-VNNI (matmul_int16.cpp) and BF16 with activations rounded to bf16
//   and AVX512-BF16 dot products; other types or CPUs fall back to kTiled;
//   One token (decode) of Q8_0, Q4_0, MXFP4 and the K-quants takes a
//   weight-streaming int8 kernel;
// kAuto: kInt8 for one token of those types and from kTiledMinTokens tokens,
//   else kRows, except one token of F16: its activations rounded to f16
//   (matmul_f16_decode).
enum class MatmulCore { kAuto, kRows, kTiled, kInt8 };
constexpr int kTiledMinTokens = 4;
Expected<MatmulCore> parse_matmul_core(const std::string& name);  // auto|new, rows|old, tiled, int8
const char* matmul_core_name(MatmulCore c);
// The core matmul() uses: TKV_MATMUL (same names) at first use, else kAuto,
// until set_matmul_core() (benchmarks compare cores in one run).
MatmulCore matmul_core();
void set_matmul_core(MatmulCore c);

// y[r] = Σ_c W[r][c] x[c] for n_tok input vectors (x: [n_tok][cols], y: [n_tok][rows]).
void matmul(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// The same, with every token's result bit-identical to matmul(w, x_t, 1, ..)
// on that token alone (the decode path), while the weights are streamed from
// memory once for all n_tok tokens: a server's batched decode step, whose
// outputs must not depend on which other sequences share the step.
void matmul_tokens(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// One token through n matrices of the same cols (Q, K, V; gate, up):
// ys[i] = ws[i] x, each bit for bit matmul(*ws[i], x, 1, ys[i], threads),
// in one parallel region where every matrix has a one-token kernel (the
// float rows, Q8_0, Q4_0, MXFP4, the K-quants with AVX512-VNNI), so a layer
// runs 4 regions and barriers instead of 7; otherwise one call per matrix.
void matmul_many(const Matrix* const* ws, int n, const float* x, float* const* ys, int threads);
void matmul_with(MatmulCore core, const Matrix& w, const float* x, int n_tok, float* y, int threads);
// The kRows core.
void matmul_rows(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// One row of W as floats (embeddings lookups).
void dequantize_row(const Matrix& w, int64_t r, float* out);

}  // namespace tkv
