// Row programs over a FlatFormat (codec/flat_format.h): quantize a row,
// decode one coordinate, rotate forward and back. One source for two
// machines: the CUDA kernels (src/cuda/) run them with a block of threads
// (Ctx: tid, nt, sync() = __syncthreads()), the CPU tests run them with one
// thread (SerialCtx) and compare every byte with the Codec's scalar
// reference (codec/kernels_ref.cpp). Each phase writes what the next reads
// and a barrier separates them, so one thread running the phases in order
// computes what the block computes.
//
// Bit-exactness: the operations and their order are the reference's (the
// same fma chains, the same float64 sums in ascending order, the same
// binary search); products that feed sums are rounded explicitly (mul_rn)
// so that no compiler contracts them into an fma the reference does not do
// (the codec is built with -ffp-contract=off for the same reason).
#pragma once
#include <cmath>
#include <cstdint>

#include "codec/flat_format.h"
#include "util/fp16.h"
#include "util/hd.h"

namespace tkv::flat {

constexpr int kMaxDim = 1024;            // make_codec's limit
constexpr int kMaxPadded = kMaxDim + 32;  // q blocks pad d to a multiple of 32

struct SerialCtx {
  int tid = 0, nt = 1;
  void sync() const {}
  void flag(int* where, int v) const { *where |= v; }
};

// Why a row was not written (Codec::quantize's errors).
enum RowStatus : int { kRowOk = 0, kRowNonFinite = 1, kRowNormRange = 2, kRowScaleOverflow = 4, kRowValueRange = 8 };

TKV_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TKV_HD inline double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TKV_HD inline bool finite_f(float v) { return (f32_bits(v) & 0x7f800000u) != 0x7f800000u; }

// Scratch of one row program (shared memory on a GPU: 8.6 KB).
struct RowScratch {
  float x[kMaxPadded];
  float y[kMaxPadded];
  uint8_t codes[kMaxDim];
  float part[16];
  float n, inv;
  double norm, s;
  int status;
};

// The part of a tq / tqc layout that codes coordinate i, or -1.
TKV_HD inline int part_of(const FlatFormat& f, int i) {
  for (int p = 0; p < f.nparts; ++p)
    if (i >= f.parts[p].begin && i < f.parts[p].begin + f.parts[p].count) return p;
  return -1;
}

// The Walsh-Hadamard butterflies in place (d a power of two): a stage's
// pairs are disjoint, so the threads split them and a barrier ends a stage.
template <class Ctx>
TKV_HD void fwht(const Ctx& c, float* v, int d) {
  for (int h = 1; h < d; h *= 2) {
    for (int p = c.tid; p < d / 2; p += c.nt) {
      const int i = (p / h) * 2 * h + p % h;
      const float a = v[i], b = v[i + h];
      v[i] = a + b;
      v[i + h] = a - b;
    }
    c.sync();
  }
}

// y[j] = Σ_i x[i] m[i*d + j], i ascending with fma (kernels_ref.cpp's
// matvec_cols): a thread per output; ends with a barrier.
template <class Ctx>
TKV_HD void matvec_cols(const Ctx& c, const float* m, const float* x, float* y, int d) {
  for (int j = c.tid; j < d; j += c.nt) {
    float acc = 0.0f;
    for (int i = 0; i < d; ++i) acc = fmaf(x[i], m[static_cast<size_t>(i) * d + j], acc);
    y[j] = acc;
  }
  c.sync();
}

// y = R x (x and y distinct, d floats); ends with a barrier.
template <class Ctx>
TKV_HD void rotate_forward(const Ctx& c, const FlatFormat& f, const float* T, const float* x, float* y) {
  const int d = f.d;
  if (f.rot == FlatFormat::kDense) return matvec_cols(c, T + f.cols, x, y, d);
  for (int i = c.tid; i < d; i += c.nt) y[i] = f.rot == FlatFormat::kHadamard ? mul_rn(x[i], T[f.sign + i]) : x[i];
  c.sync();
  if (f.rot != FlatFormat::kHadamard) return;
  fwht(c, y, d);
  for (int i = c.tid; i < d; i += c.nt) y[i] = mul_rn(y[i], f.rot_scale);
  c.sync();
}

// x = Rᵀ y (x and y distinct); ends with a barrier.
template <class Ctx>
TKV_HD void rotate_inverse(const Ctx& c, const FlatFormat& f, const float* T, const float* y, float* x) {
  const int d = f.d;
  if (f.rot == FlatFormat::kDense) return matvec_cols(c, T + f.rows, y, x, d);
  for (int i = c.tid; i < d; i += c.nt) x[i] = y[i];
  c.sync();
  if (f.rot != FlatFormat::kHadamard) return;
  fwht(c, x, d);
  for (int i = c.tid; i < d; i += c.nt) x[i] = mul_rn(mul_rn(x[i], f.rot_scale), T[f.sign + i]);
  c.sync();
}

// #{k < nb : bnd[k] < u}: std::lower_bound's answer (kernels_ref.cpp).
TKV_HD inline int cell_of(const float* bnd, int nb, float u) {
  int lo = 0, hi = nb;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (bnd[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Packs every bit plane of the codes in s.codes into the row (thread per byte).
template <class Ctx>
TKV_HD void pack_planes(const Ctx& c, const FlatFormat& f, const uint8_t* codes, uint8_t* out) {
  for (int p = 0; p < f.nparts; ++p) {
    const FlatPart& part = f.parts[p];
    for (int k = 0; k < part.nplanes; ++k) {
      const int w = part.width[k], sh = part.shift[k], per = 8 / w;
      const unsigned mask = (1u << w) - 1u;
      const int nbytes = (part.count * w + 7) / 8;
      for (int b = c.tid; b < nbytes; b += c.nt) {
        unsigned byte = 0;
        for (int q = 0; q < per; ++q) {
          const int idx = b * per + q;
          if (idx < part.count) byte |= ((static_cast<unsigned>(codes[part.begin + idx]) >> sh) & mask) << (q * w);
        }
        out[part.offset[k] + b] = static_cast<uint8_t>(byte);
      }
    }
  }
}

TKV_HD inline void store_u16(uint8_t* out, uint16_t h) {
  out[0] = static_cast<uint8_t>(h & 0xff);
  out[1] = static_cast<uint8_t>(h >> 8);
}

// llama.cpp's q8_0 / q4_0 block b of x (kernels_ref.cpp's arithmetic).
TKV_HD inline void quantize_block(bool q8, const float* x, uint8_t* out) {
  if (q8) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
    const float dl = amax / 127.0f;
    const float id = recip_or_zero(dl);
    store_u16(out, f32_to_f16(dl));
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(mul_rn(x[j], id))));
    return;
  }
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
  const float dl = max / -8.0f;
  const float id = recip_or_zero(dl);
  store_u16(out, f32_to_f16(dl));
  for (int j = 0; j < 16; ++j) {
    int q0 = static_cast<int>(static_cast<int8_t>(mul_rn(x[j], id) + 8.5f));
    int q1 = static_cast<int>(static_cast<int8_t>(mul_rn(x[j + 16], id) + 8.5f));
    q0 = q0 < 15 ? q0 : 15;
    q1 = q1 < 15 ? q1 : 15;
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Each coordinate's cell in its part's codebook at y[i] * s.inv (0 where no
// part codes it), then the bit planes into the row (tq and tqc alike).
template <class Ctx>
TKV_HD void code_and_pack(const Ctx& c, const FlatFormat& f, const float* T, const float* y, RowScratch& s,
                          uint8_t* out) {
  for (int i = c.tid; i < f.d; i += c.nt) {
    const int p = part_of(f, i);
    s.codes[i] = p < 0 ? 0 : static_cast<uint8_t>(cell_of(T + f.parts[p].bnd, (1 << f.parts[p].bits) - 1, mul_rn(y[i], s.inv)));
  }
  c.sync();
  pack_planes(c, f, s.codes, out);
}

// tq: norm, codes, stored norm (format_turbo.cpp). y holds the rotated row.
template <class Ctx>
TKV_HD int quantize_turbo(const Ctx& c, const FlatFormat& f, const float* T, RowScratch& s, uint8_t* out) {
  const int d = f.d;
  const float* y = s.y;
  for (int t = c.tid; t < 16; t += c.nt) {
    float p = 0.0f;
    for (int i = t; i < d; i += 16) p = fmaf(y[i], y[i], p);
    s.part[t] = p;
  }
  c.sync();
  if (c.tid == 0) {
    for (int w = 8; w >= 1; w /= 2)
      for (int i = 0; i < w; ++i) s.part[i] = s.part[i] + s.part[i + w];
    const float ss = s.part[0];
    double norm = sqrt(static_cast<double>(ss));
    if (!finite_f(ss)) {  // the squares overflowed float: redo in double
      double acc = 0;
      for (int i = 0; i < d; ++i) acc = acc + dmul_rn(static_cast<double>(y[i]), y[i]);
      norm = sqrt(acc);
    }
    s.norm = norm;
    if (norm >= kUNormMax) s.status = kRowNormRange;
    s.n = static_cast<float>(norm);
    s.inv = recip_or_zero(s.n);
  }
  c.sync();
  if (s.status) return s.status;
  code_and_pack(c, f, T, y, s, out);
  if (c.tid == 0) {
    float stored = s.n;
    const double norm = s.norm;
    if (f.norm != FlatFormat::kPlain && s.n > 0.0f) {
      double c2 = 0, uc = 0;
      for (int i = 0; i < d; ++i) {
        const int p = part_of(f, i);
        const double cv = T[f.parts[p].cent + s.codes[i]];
        c2 = c2 + dmul_rn(cv, cv);
        uc = uc + dmul_rn(cv, static_cast<double>(y[i]) / norm);
      }
      stored = static_cast<float>(f.norm == FlatFormat::kCorrect ? norm / sqrt(c2) : norm / uc);
    }
    if (!(stored < kUNormMax)) s.status = kRowNormRange;
    else store_u16(out, f32_to_unorm16(stored));
  }
  c.sync();
  return s.status;
}

// tqc: whitening, row scale, codes, least-squares scale (format_calibrated.cpp).
template <class Ctx>
TKV_HD int quantize_calibrated(const Ctx& c, const FlatFormat& f, const float* T, RowScratch& s, uint8_t* out) {
  const int d = f.d;
  float* y = s.y;
  for (int i = c.tid; i < d; i += c.nt) y[i] = mul_rn(y[i], T[f.inv_sigma + i]);
  c.sync();
  if (c.tid == 0) {
    double ss = 0;
    int n = 0;
    for (int p = 0; p < f.nparts; ++p)  // ascending disjoint runs: the codec's order
      for (int i = f.parts[p].begin; i < f.parts[p].begin + f.parts[p].count; ++i) {
        ss = ss + dmul_rn(static_cast<double>(y[i]), y[i]);
        ++n;
      }
    const double sc = n > 0 ? sqrt(ss / n) : 0.0;
    s.s = sc;
    if (!(sc < kUNormMax)) s.status = kRowNormRange;
    s.n = static_cast<float>(sc);
    s.inv = recip_or_zero(s.n);
  }
  c.sync();
  if (s.status) return s.status;
  code_and_pack(c, f, T, y, s, out);
  for (uint32_t b = f.used_bytes + c.tid; b < f.row_bytes; b += c.nt) out[b] = 0;
  if (c.tid == 0) {
    double zc = 0, cc = 0;
    for (int p = 0; p < f.nparts; ++p)
      for (int i = f.parts[p].begin; i < f.parts[p].begin + f.parts[p].count; ++i) {
        const float sg = T[f.coord_scale + i];
        const double v = dmul_rn(static_cast<double>(sg), sg);
        const double cv = T[f.parts[p].cent + s.codes[i]];
        zc = zc + dmul_rn(dmul_rn(v, y[i]), cv);
        cc = cc + dmul_rn(dmul_rn(v, cv), cv);
      }
    const double t = cc > 0 && zc > 0 ? zc / cc : s.s;
    if (!(t < kUNormMax)) s.status = kRowNormRange;
    else store_u16(out, f32_to_unorm16(static_cast<float>(t)));
  }
  c.sync();
  return s.status;
}

// Quantizes one row of f.d floats (x; mean already subtracted for tqc) into
// f.row_bytes bytes; returns a RowStatus (nothing meaningful is written
// unless kRowOk). Every thread of the block calls it.
template <class Ctx>
TKV_HD int quantize_row(const Ctx& c, const FlatFormat& f, const float* T, const float* x, uint8_t* out,
                        RowScratch& s) {
  const int d = f.d;
  const bool q = f.kind == FlatFormat::kQ8_0 || f.kind == FlatFormat::kQ4_0;
  const int dpad = q ? (d + 31) / 32 * 32 : (d + 15) / 16 * 16;
  if (c.tid == 0) s.status = kRowOk;
  c.sync();
  for (int i = c.tid; i < dpad; i += c.nt) {
    const float v = i < d ? x[i] : 0.0f;
    s.x[i] = v;
    s.y[i] = 0.0f;
    if (!finite_f(v)) c.flag(&s.status, kRowNonFinite);
  }
  c.sync();
  if (s.status) return s.status;
  rotate_forward(c, f, T, s.x, s.y);
  const float* y = s.y;
  switch (f.kind) {
    case FlatFormat::kF32:
      for (int i = c.tid; i < d; i += c.nt) {
        const uint32_t u = f32_bits(y[i]);
        for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
      }
      break;
    case FlatFormat::kF16:
    case FlatFormat::kBF16: {
      // Range first: nothing may round to infinity (format_plain.cpp).
      const float limit = f.kind == FlatFormat::kF16 ? 65520.0f : bits_f32(0x7f7f8000u);
      for (int i = c.tid; i < d; i += c.nt)
        if (fabsf(y[i]) >= limit) c.flag(&s.status, kRowValueRange);
      c.sync();
      if (s.status) return s.status;
      for (int i = c.tid; i < d; i += c.nt)
        store_u16(out + 2 * i, f.kind == FlatFormat::kF16 ? f32_to_f16(y[i]) : f32_to_bf16(y[i]));
      break;
    }
    case FlatFormat::kQ8_0:
    case FlatFormat::kQ4_0: {
      const bool q8 = f.kind == FlatFormat::kQ8_0;
      const int nb = dpad / 32;
      // Scales are f16: a block whose scale would overflow is an error, not inf.
      for (int b = c.tid; b < nb; b += c.nt) {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(y[b * 32 + j]));
        if (amax / (q8 ? 127.0f : 8.0f) >= 65504.0f) c.flag(&s.status, kRowScaleOverflow);
      }
      c.sync();
      if (s.status) return s.status;
      for (int b = c.tid; b < nb; b += c.nt) quantize_block(q8, y + b * 32, out + b * (q8 ? 34 : 18));
      break;
    }
    case FlatFormat::kTurbo:
      return quantize_turbo(c, f, T, s, out);
    case FlatFormat::kCalibrated:
      return quantize_calibrated(c, f, T, s, out);
  }
  c.sync();
  return kRowOk;
}

// The row's scale (tq norm, tqc scale) that multiplies every decode_coord;
// 1 for the other formats (their block scales are inside decode_coord).
TKV_HD inline float row_scale(const FlatFormat& f, const uint8_t* row) {
  if (f.kind != FlatFormat::kTurbo && f.kind != FlatFormat::kCalibrated) return 1.0f;
  return unorm16_to_f32(static_cast<uint16_t>(row[0] | (row[1] << 8)));
}

// Coordinate i of the row in its coding domain, before row_scale (tq, tqc:
// the centroid; tqc's coord_scale is not applied). Coordinates no part
// codes, and i >= d, are 0.
TKV_HD inline float decode_coord(const FlatFormat& f, const float* T, const uint8_t* row, int i) {
  if (i >= f.d) return 0.0f;
  switch (f.kind) {
    case FlatFormat::kF32:
      return bits_f32(static_cast<uint32_t>(row[4 * i]) | static_cast<uint32_t>(row[4 * i + 1]) << 8 |
                      static_cast<uint32_t>(row[4 * i + 2]) << 16 | static_cast<uint32_t>(row[4 * i + 3]) << 24);
    case FlatFormat::kF16:
      return f16_to_f32(static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8)));
    case FlatFormat::kBF16:
      return bf16_to_f32(static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8)));
    case FlatFormat::kQ8_0: {
      const uint8_t* blk = row + (i / 32) * 34;
      const float dl = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
      return static_cast<float>(static_cast<int8_t>(blk[2 + i % 32])) * dl;
    }
    case FlatFormat::kQ4_0: {
      const uint8_t* blk = row + (i / 32) * 18;
      const float dl = f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
      const int j = i % 32;
      const uint8_t byte = blk[2 + (j & 15)];
      return static_cast<float>(((j < 16) ? (byte & 15) : (byte >> 4)) - 8) * dl;
    }
    default: {
      const int p = part_of(f, i);
      if (p < 0) return 0.0f;
      const FlatPart& part = f.parts[p];
      const int j = i - part.begin;
      unsigned code = 0;
      for (int k = 0; k < part.nplanes; ++k) {
        const int w = part.width[k], per = 8 / w;
        const unsigned v = (row[part.offset[k] + j / per] >> ((j % per) * w)) & ((1u << w) - 1u);
        code |= v << part.shift[k];
      }
      return T[part.cent + code];
    }
  }
}

}  // namespace tkv::flat
