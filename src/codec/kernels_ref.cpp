// Scalar reference kernels: the specification the SIMD path must match bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "codec/kernels.h"
#include "util/fp16.h"
#include "util/llama_blocks.h"

namespace tkv {
namespace ref {

static void fwht(float* y, int d) {
  for (int h = 1; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
}

void rht_forward(const float* x, const float* sign, float scale, float* y, int d) {
  for (int i = 0; i < d; ++i) y[i] = x[i] * sign[i];
  fwht(y, d);
  for (int i = 0; i < d; ++i) y[i] *= scale;
}

void rht_inverse(const float* y, const float* sign, float scale, float* x, int d) {
  for (int i = 0; i < d; ++i) x[i] = y[i];
  fwht(x, d);
  for (int i = 0; i < d; ++i) x[i] = (x[i] * scale) * sign[i];
}

void matvec_cols(const float* m, const float* x, float* y, int d, int n) {
  for (int v = 0; v < n; ++v, x += d, y += d) {
    for (int j = 0; j < d; ++j) y[j] = 0.0f;
    for (int i = 0; i < d; ++i) {
      const float xi = x[i];
      const float* col = m + static_cast<size_t>(i) * d;
      for (int j = 0; j < d; ++j) y[j] = std::fma(xi, col[j], y[j]);
    }
  }
}

float sumsq(const float* x, int d) {
  float p[16] = {0};
  for (int i = 0; i < d; ++i) p[i % 16] = std::fma(x[i], x[i], p[i % 16]);
  // Fixed reduction tree: halve the width each step (matches the SIMD path).
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) p[i] = p[i] + p[i + w];
  return p[0];
}

void encode_cells(const float* y, int n, float inv, const float* bnd, int nb, uint8_t* codes) {
  for (int i = 0; i < n; ++i) {
    const float u = y[i] * inv;
    // Binary search for the number of boundaries strictly below u.
    codes[i] = static_cast<uint8_t>(std::lower_bound(bnd, bnd + nb, u) - bnd);
  }
}

void decode_cells(const uint8_t* codes, int n, const float* cent, float scale, float* out) {
  for (int i = 0; i < n; ++i) out[i] = scale * cent[codes[i]];
}

void quantize_q8_0(const float* x, int nblocks, uint8_t* out) { llama_quantize_q8_0(x, nblocks, out); }
void quantize_q4_0(const float* x, int nblocks, uint8_t* out) { llama_quantize_q4_0(x, nblocks, out); }

void to_f16(const float* x, int n, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
void to_bf16(const float* x, int n, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
void from_f16(const uint8_t* in, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = f16_to_f32(h);
  }
}
void from_bf16(const uint8_t* in, int n, float* out) {
  for (int i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = bf16_to_f32(h);
  }
}

}  // namespace ref

bool all_finite(const float* x, size_t n, size_t* bad_index) {
  // Fast pass (vectorizes): an exponent field of all ones is Inf or NaN.
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  if (!bad) return true;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) { if (bad_index) *bad_index = i; return false; }
  return true;
}

Expected<double> unit_scale(const float* y, int d) {
  double ss = 0;
  for (int i = 0; i < d; ++i) ss += double(y[i]) * y[i];
  const double norm = std::sqrt(ss);
  if (!(norm < kUNormMax)) return Status::Error("norm " + std::to_string(norm) + " exceeds the norm range (4.29e9)");
  return norm > 0 ? std::sqrt(double(d)) / norm : 0.0;
}

size_t plane_bytes(int n, int width) { return (static_cast<size_t>(n) * width + 7) / 8; }

std::vector<int> plane_widths(int bits) {
  if (bits == 8) return {8};
  std::vector<int> w;
  for (int p : {4, 2, 1})
    if (bits >= p) { w.push_back(p); bits -= p; }
  return w;
}

size_t coded_bytes(int n, int bits) {
  size_t b = 0;
  for (int w : plane_widths(bits)) b += plane_bytes(n, w);
  return b;
}

template <int W>
static void pack_w(const uint8_t* vals, int n, int shift, uint8_t* out) {
  constexpr int per = 8 / W;
  constexpr unsigned mask = (1u << W) - 1u;
  const int full = n / per;
  for (int j = 0; j < full; ++j) {
    unsigned b = 0;
    for (int k = 0; k < per; ++k) b |= ((vals[j * per + k] >> shift) & mask) << (k * W);
    out[j] = static_cast<uint8_t>(b);
  }
  if (n % per) {
    unsigned b = 0;
    for (int k = 0; k < n % per; ++k) b |= ((vals[full * per + k] >> shift) & mask) << (k * W);
    out[full] = static_cast<uint8_t>(b);
  }
}
template <int W>
static void unpack_w(const uint8_t* in, int n, int shift, uint8_t* vals) {
  constexpr int per = 8 / W;
  constexpr unsigned mask = (1u << W) - 1u;
  for (int i = 0; i < n; ++i)
    vals[i] |= static_cast<uint8_t>(((in[i / per] >> ((i % per) * W)) & mask) << shift);
}

size_t pack_plane(const uint8_t* vals, int n, int width, int shift, uint8_t* out) {
  switch (width) {
    case 8: for (int i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(vals[i] >> shift); break;
    case 4: pack_w<4>(vals, n, shift, out); break;
    case 2: pack_w<2>(vals, n, shift, out); break;
    default: pack_w<1>(vals, n, shift, out); break;
  }
  return plane_bytes(n, width);
}

void unpack_plane_or(const uint8_t* in, int n, int width, int shift, uint8_t* vals) {
  switch (width) {
    case 8: for (int i = 0; i < n; ++i) vals[i] |= static_cast<uint8_t>(in[i] << shift); break;
    case 4: unpack_w<4>(in, n, shift, vals); break;
    case 2: unpack_w<2>(in, n, shift, vals); break;
    default: unpack_w<1>(in, n, shift, vals); break;
  }
}

}  // namespace tkv
