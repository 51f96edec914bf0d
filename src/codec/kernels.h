// Row kernels of the codec, each in two versions with identical results:
//   ref::  plain scalar C++, the specification;
//   simd:: Highway, runtime-dispatched (AVX-512, AVX2 or the emulated fallback).
// Operation order is part of the contract (same adds in the same order, fma where
// the reference uses std::fma), so the SIMD path writes the same bytes as the
// reference. Buffers passed to simd:: functions may be read up to the next
// multiple of 16 floats (callers pad with zeros; see kRowPad).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/status.h"

namespace tkv {

constexpr int kRowPad = 16;
inline int padded(int d) { return (d + kRowPad - 1) / kRowPad * kRowPad; }

#define TKV_CODEC_KERNELS(NS)                                                          \
  namespace NS {                                                                       \
  /* y = H (sign ⊙ x) * scale, H the Walsh-Hadamard matrix; d a power of two */        \
  void rht_forward(const float* x, const float* sign, float scale, float* y, int d);   \
  /* x = sign ⊙ (H y) * scale  (the inverse when scale = 1/sqrt(d)) */                 \
  void rht_inverse(const float* y, const float* sign, float scale, float* x, int d);   \
  /* y = Σ_i x[i] · M[i*d .. i*d+d) with fma, i ascending (M holds columns), for  */  \
  /* n vectors x[v*d ..], y[v*d ..] (one pass over M serves up to 4 of them)       */  \
  void matvec_cols(const float* m, const float* x, float* y, int d, int n);            \
  /* Σ x², element i added to partial i % 16, partials reduced in a fixed tree */      \
  float sumsq(const float* x, int d);                                                  \
  /* codes[i] = #{j < nb : bnd[j] < y[i] * inv}; nb <= 255 */                          \
  void encode_cells(const float* y, int n, float inv, const float* bnd, int nb,         \
                    uint8_t* codes);                                                   \
  /* out[i] = scale * cent[codes[i]] */                                                \
  void decode_cells(const uint8_t* codes, int n, const float* cent, float scale,         \
                    float* out);                                                       \
  /* llama.cpp q8_0 / q4_0 blocks of 32 (d a multiple of 32 or zero-padded) */         \
  void quantize_q8_0(const float* x, int nblocks, uint8_t* out);                       \
  void quantize_q4_0(const float* x, int nblocks, uint8_t* out);                       \
  /* f32 -> f16 / bf16 (round to nearest even) and back; out is little-endian */       \
  void to_f16(const float* x, int n, uint8_t* out);                                    \
  void to_bf16(const float* x, int n, uint8_t* out);                                   \
  void from_f16(const uint8_t* in, int n, float* out);                                 \
  void from_bf16(const uint8_t* in, int n, float* out);                                \
  }

TKV_CODEC_KERNELS(ref)
TKV_CODEC_KERNELS(simd)
#undef TKV_CODEC_KERNELS

// Shared helpers (scalar; both paths call these).
bool all_finite(const float* x, size_t n, size_t* bad_index);
// sqrt(d) / |y| in float64 (0 for a zero row): the factor that gives a rotated
// row unit-variance coordinates (ttB, te8); fails when |y| is outside the
// 16-bit norm range.
Expected<double> unit_scale(const float* y, int d);
// Bit planes: codes of `width` bits (1..8) packed LSB-first; returns bytes written.
size_t plane_bytes(int n, int width);
// How a code of `bits` (1..8) is split into planes: {8}, or 4, 2, 1 as needed.
std::vector<int> plane_widths(int bits);
// Bytes of n codes of `bits` in their planes.
size_t coded_bytes(int n, int bits);
size_t pack_plane(const uint8_t* vals, int n, int width, int shift, uint8_t* out);
void unpack_plane_or(const uint8_t* in, int n, int width, int shift, uint8_t* vals);

}  // namespace tkv
