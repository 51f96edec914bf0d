// Weight matrices straight from GGUF (F32, F16, BF16, Q8_0, Q4_0) and the
// matrix-vector products of the forward pass (Highway SIMD, OpenMP threads).
// A weight with GGUF dims [cols, rows] maps cols inputs to rows outputs.
#pragma once
#include <cstdint>
#include <string>

#include "model/gguf.h"
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

// y[r] = Σ_c W[r][c] x[c] for n_tok input vectors (x: [n_tok][cols], y: [n_tok][rows]).
void matmul(const Matrix& w, const float* x, int n_tok, float* y, int threads);
// One row of W as floats (embeddings lookups).
void dequantize_row(const Matrix& w, int64_t r, float* out);

}  // namespace tkv
