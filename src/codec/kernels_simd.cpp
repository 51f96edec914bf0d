// Highway SIMD versions of the codec kernels (see kernels.h for the contract).
// Memory traffic is tiny (one row, a few KB); these are bound by instruction count.
#include <cmath>
#include <cstring>

#include "codec/kernels.h"
#include "util/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/kernels_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a*b + c with one rounding on every target (the emulated targets' MulAdd rounds twice).
template <class D, class V>
HWY_INLINE V Fma(D d, V a, V b, V c) {
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulAdd(a, b, c);
#else
  HWY_ALIGN float ta[hn::MaxLanes(d)], tb[hn::MaxLanes(d)], tc[hn::MaxLanes(d)];
  hn::Store(a, d, ta); hn::Store(b, d, tb); hn::Store(c, d, tc);
  for (size_t i = 0; i < hn::Lanes(d); ++i) tc[i] = std::fma(ta[i], tb[i], tc[i]);
  return hn::Load(d, tc);
#endif
}

// In-place FWHT with the reference's stage order (h = 1, 2, 4, ...). Stages with
// h below the vector width use a lane permutation (i ^ h); results are the same
// a + b / a - b as the scalar butterflies, so bits match exactly.
HWY_INLINE void Fwht(float* y, int d) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int N = static_cast<int>(hn::Lanes(df));
  if (d < N) {  // tiny rows: scalar butterflies
    for (int h = 1; h < d; h *= 2)
      for (int i = 0; i < d; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = y[j], b = y[j + h];
          y[j] = a + b;
          y[j + h] = a - b;
        }
    return;
  }
  const auto iota = hn::Iota(di, 0);
  for (int h = 1; h < N; h *= 2) {
    const auto idx = hn::IndicesFromVec(df, hn::Xor(iota, hn::Set(di, h)));
    const auto upper = hn::RebindMask(df, hn::Ne(hn::And(iota, hn::Set(di, h)), hn::Zero(di)));
    for (int i = 0; i < d; i += N) {
      const auto v = hn::LoadU(df, y + i);
      const auto p = hn::TableLookupLanes(v, idx);
      hn::StoreU(hn::IfThenElse(upper, hn::Sub(p, v), hn::Add(v, p)), df, y + i);
    }
  }
  for (int h = N; h < d; h *= 2)
    for (int i = 0; i < d; i += 2 * h)
      for (int j = i; j < i + h; j += N) {
        const auto a = hn::LoadU(df, y + j), b = hn::LoadU(df, y + j + h);
        hn::StoreU(hn::Add(a, b), df, y + j);
        hn::StoreU(hn::Sub(a, b), df, y + j + h);
      }
}

// The whole transform in V registers (d = V * lanes): sign on load, the same
// butterflies in the same order as Fwht, scale on store.
template <int V>
HWY_INLINE void RhtForwardRegs(const float* x, const float* sign, float scale, float* y) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int N = static_cast<int>(hn::Lanes(df));
  decltype(hn::Zero(df)) v[V];
  for (int k = 0; k < V; ++k) v[k] = hn::Mul(hn::LoadU(df, x + k * N), hn::LoadU(df, sign + k * N));
  const auto iota = hn::Iota(di, 0);
  for (int h = 1; h < N; h *= 2) {
    const auto idx = hn::IndicesFromVec(df, hn::Xor(iota, hn::Set(di, h)));
    const auto upper = hn::RebindMask(df, hn::Ne(hn::And(iota, hn::Set(di, h)), hn::Zero(di)));
    for (int k = 0; k < V; ++k) {
      const auto p = hn::TableLookupLanes(v[k], idx);
      v[k] = hn::IfThenElse(upper, hn::Sub(p, v[k]), hn::Add(v[k], p));
    }
  }
  for (int hv = 1; hv < V; hv *= 2)
    for (int k = 0; k < V; k += 2 * hv)
      for (int j = k; j < k + hv; ++j) {
        const auto a = v[j], b = v[j + hv];
        v[j] = hn::Add(a, b);
        v[j + hv] = hn::Sub(a, b);
      }
  const auto s = hn::Set(df, scale);
  for (int k = 0; k < V; ++k) hn::StoreU(hn::Mul(v[k], s), df, y + k * N);
}

void RhtForward(const float* x, const float* sign, float scale, float* y, int d) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
#if HWY_TARGET != HWY_SCALAR
  if (d % N == 0 && N >= 4) {
    switch (d / N) {
      case 1: RhtForwardRegs<1>(x, sign, scale, y); return;
      case 2: RhtForwardRegs<2>(x, sign, scale, y); return;
      case 4: RhtForwardRegs<4>(x, sign, scale, y); return;
      case 8: RhtForwardRegs<8>(x, sign, scale, y); return;
      case 16: RhtForwardRegs<16>(x, sign, scale, y); return;
      default: break;
    }
  }
#endif
  int i = 0;
  for (; i + N <= d; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), hn::LoadU(df, sign + i)), df, y + i);
  for (; i < d; ++i) y[i] = x[i] * sign[i];
  Fwht(y, d);
  const auto s = hn::Set(df, scale);
  for (i = 0; i + N <= d; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, y + i), s), df, y + i);
  for (; i < d; ++i) y[i] *= scale;
}

void RhtInverse(const float* y, const float* sign, float scale, float* x, int d) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  if (x != y) std::memcpy(x, y, sizeof(float) * d);
  Fwht(x, d);
  const auto s = hn::Set(df, scale);
  int i = 0;
  for (; i + N <= d; i += N)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), s), hn::LoadU(df, sign + i)), df, x + i);
  for (; i < d; ++i) x[i] = (x[i] * scale) * sign[i];
}

// NV vectors (x[v*d ..]) against one pass over the columns: each column
// block is loaded once for all of them (the matrix is L2-resident at d >= 128
// and the loads were the bound). Every output still sums i = 0..d-1 in order.
template <int NV>
void MatvecColsN(const float* m, const float* x, float* y, int d) {
  const hn::ScalableTag<float> df;
  const int N = static_cast<int>(hn::Lanes(df));
  int j0 = 0;
  // Blocks of 4 output vectors per input vector stay in registers while all d columns stream by.
  for (; j0 + 4 * N <= d; j0 += 4 * N) {
    hn::Vec<decltype(df)> a[NV][4];
    for (int v = 0; v < NV; ++v)
      for (int k = 0; k < 4; ++k) a[v][k] = hn::Zero(df);
    for (int i = 0; i < d; ++i) {
      const float* col = m + static_cast<size_t>(i) * d + j0;
      const auto c0 = hn::LoadU(df, col), c1 = hn::LoadU(df, col + N);
      const auto c2 = hn::LoadU(df, col + 2 * N), c3 = hn::LoadU(df, col + 3 * N);
      for (int v = 0; v < NV; ++v) {
        const auto xi = hn::Set(df, x[static_cast<size_t>(v) * d + i]);
        a[v][0] = Fma(df, xi, c0, a[v][0]);
        a[v][1] = Fma(df, xi, c1, a[v][1]);
        a[v][2] = Fma(df, xi, c2, a[v][2]);
        a[v][3] = Fma(df, xi, c3, a[v][3]);
      }
    }
    for (int v = 0; v < NV; ++v)
      for (int k = 0; k < 4; ++k) hn::StoreU(a[v][k], df, y + static_cast<size_t>(v) * d + j0 + k * N);
  }
  for (; j0 + N <= d; j0 += N) {
    hn::Vec<decltype(df)> a[NV];
    for (int v = 0; v < NV; ++v) a[v] = hn::Zero(df);
    for (int i = 0; i < d; ++i) {
      const auto c = hn::LoadU(df, m + static_cast<size_t>(i) * d + j0);
      for (int v = 0; v < NV; ++v) a[v] = Fma(df, hn::Set(df, x[static_cast<size_t>(v) * d + i]), c, a[v]);
    }
    for (int v = 0; v < NV; ++v) hn::StoreU(a[v], df, y + static_cast<size_t>(v) * d + j0);
  }
  for (int v = 0; v < NV; ++v)
    for (int j = j0; j < d; ++j) {
      float a = 0.0f;
      for (int i = 0; i < d; ++i) a = std::fma(x[static_cast<size_t>(v) * d + i], m[static_cast<size_t>(i) * d + j], a);
      y[static_cast<size_t>(v) * d + j] = a;
    }
}

void MatvecCols(const float* m, const float* x, float* y, int d, int n) {
  for (; n >= 4; n -= 4, x += 4 * static_cast<size_t>(d), y += 4 * static_cast<size_t>(d)) MatvecColsN<4>(m, x, y, d);
  switch (n) {
    case 3: MatvecColsN<3>(m, x, y, d); break;
    case 2: MatvecColsN<2>(m, x, y, d); break;
    case 1: MatvecColsN<1>(m, x, y, d); break;
    default: break;
  }
}

float Sumsq(const float* x, int d) {
  // 16 partial sums = one AVX-512 vector, two AVX2 vectors or four 128-bit ones.
  const hn::ScalableTag<float> df;
  constexpr int kMax = static_cast<int>(hn::MaxLanes(df));
  const int N = static_cast<int>(hn::Lanes(df));
  HWY_ALIGN float p[16 > kMax ? 16 : kMax] = {0};
  if (N > 16 || 16 % N != 0) {  // unusual vector widths: use the reference
    return ref::sumsq(x, d);
  }
  const int V = 16 / N;
  decltype(hn::Zero(df)) acc[16];
  for (int k = 0; k < V; ++k) acc[k] = hn::Zero(df);
  int i = 0;
  for (; i + 16 <= d; i += 16)
    for (int k = 0; k < V; ++k) {
      const auto v = hn::LoadU(df, x + i + k * N);
      acc[k] = Fma(df, v, v, acc[k]);
    }
  for (int k = 0; k < V; ++k) hn::StoreU(acc[k], df, p + k * N);
  for (int r = 0; i < d; ++i, ++r) p[r] = std::fma(x[i], x[i], p[r]);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) p[k] = p[k] + p[k + w];
  return p[0];
}

void EncodeCells(const float* y, int n, float inv, const float* bnd, int nb, uint8_t* codes) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> du8;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto vinv = hn::Set(df, inv);
  int i = 0;
  if (nb > 15) {  // 5+ bits: branch-free binary search with gathers (nb = 2^b - 1)
    for (; i + N <= n; i += N) {
      const auto u = hn::Mul(hn::LoadU(df, y + i), vinv);
      auto idx = hn::Zero(di);
      for (int step = (nb + 1) / 2; step >= 1; step /= 2) {
        const auto cand = hn::Add(idx, hn::Set(di, step));
        const auto b = hn::GatherIndex(df, bnd, hn::Sub(cand, hn::Set(di, 1)));
        idx = hn::IfThenElse(hn::RebindMask(di, hn::Lt(b, u)), cand, idx);
      }
      hn::StoreU(hn::DemoteTo(du8, idx), du8, codes + i);
    }
    if (i < n) ref::encode_cells(y + i, n - i, inv, bnd, nb, codes + i);
    return;
  }
  for (; i + N <= n; i += N) {
    const auto u = hn::Mul(hn::LoadU(df, y + i), vinv);
    auto cnt = hn::Zero(di);
    for (int j = 0; j < nb; ++j)  // count boundaries strictly below u
      cnt = hn::Sub(cnt, hn::VecFromMask(di, hn::RebindMask(di, hn::Lt(hn::Set(df, bnd[j]), u))));
    hn::StoreU(hn::DemoteTo(du8, cnt), du8, codes + i);
  }
  if (i < n) ref::encode_cells(y + i, n - i, inv, bnd, nb, codes + i);
}

void DecodeCells(const uint8_t* codes, int n, const float* cent, float scale, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> du8;
  const int N = static_cast<int>(hn::Lanes(df));
  const auto s = hn::Set(df, scale);
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto idx = hn::PromoteTo(di, hn::LoadU(du8, codes + i));
    hn::StoreU(hn::Mul(s, hn::GatherIndex(df, cent, idx)), df, out + i);
  }
  for (; i < n; ++i) out[i] = scale * cent[codes[i]];
}

// roundf (half away from zero) exactly: trunc, then step away if the
// remainder (exact in float) is at least one half.
template <class D, class V>
HWY_INLINE V RoundHalfAway(D df, V v) {
  const auto t = hn::Trunc(v);
  const auto rem = hn::Abs(hn::Sub(v, t));
  const auto step = hn::CopySignToAbs(hn::Set(df, 1.0f), v);
  return hn::IfThenElse(hn::Ge(rem, hn::Set(df, 0.5f)), hn::Add(t, step), t);
}

void QuantizeQ8_0(const float* x, int nblocks, uint8_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(di)> di8;
  const int N = static_cast<int>(hn::Lanes(df));
  if (32 % N != 0) { ref::quantize_q8_0(x, nblocks, out); return; }
  for (int b = 0; b < nblocks; ++b, x += 32, out += 34) {
    auto m = hn::Zero(df);
    for (int j = 0; j < 32; j += N) m = hn::Max(m, hn::Abs(hn::LoadU(df, x + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, m));
    const float dl = amax / 127.0f;
    const float id = recip_or_zero(dl);
    const uint16_t h = f32_to_f16(dl);
    std::memcpy(out, &h, 2);
    const auto vid = hn::Set(df, id);
    for (int j = 0; j < 32; j += N) {
      const auto q = hn::ConvertTo(di, RoundHalfAway(df, hn::Mul(hn::LoadU(df, x + j), vid)));
      hn::StoreU(hn::DemoteTo(di8, q), di8, reinterpret_cast<int8_t*>(out + 2 + j));
    }
  }
}

void QuantizeQ4_0(const float* x, int nblocks, uint8_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> du8;
  const int N = static_cast<int>(hn::Lanes(df));
  if (16 % N != 0) { ref::quantize_q4_0(x, nblocks, out); return; }
  for (int b = 0; b < nblocks; ++b, x += 32, out += 18) {
    auto m = hn::Zero(df);
    for (int j = 0; j < 32; j += N) m = hn::Max(m, hn::Abs(hn::LoadU(df, x + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, m));
    float max = 0.0f;  // the first element whose magnitude is amax, with its sign
    if (amax > 0.0f)
      for (int j = 0; j < 32; ++j)
        if (std::fabs(x[j]) == amax) { max = x[j]; break; }
    const float dl = max / -8.0f;
    const float id = recip_or_zero(dl);
    const uint16_t h = f32_to_f16(dl);
    std::memcpy(out, &h, 2);
    const auto vid = hn::Set(df, id), half = hn::Set(df, 8.5f);
    const auto fifteen = hn::Set(di, 15);
    for (int j = 0; j < 16; j += N) {
      const auto lo = hn::Min(fifteen, hn::ConvertTo(di, hn::Add(hn::Mul(hn::LoadU(df, x + j), vid), half)));
      const auto hi = hn::Min(fifteen, hn::ConvertTo(di, hn::Add(hn::Mul(hn::LoadU(df, x + j + 16), vid), half)));
      const auto packed = hn::Or(lo, hn::ShiftLeft<4>(hi));
      hn::StoreU(hn::DemoteTo(du8, packed), du8, out + 2 + j);
    }
  }
}

// f16: hardware conversion (F16C rounds to nearest even, like f32_to_f16) on
// x86 SIMD targets; the emulated targets use the reference.
void ToF16(const float* x, int n, uint8_t* out) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // AVX2 and every AVX-512 target
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, x + i)), dh, reinterpret_cast<hwy::float16_t*>(out) + i);
  if (i < n) ref::to_f16(x + i, n - i, out + 2 * i);
#else
  ref::to_f16(x, n, out);
#endif
}

void FromF16(const uint8_t* in, int n, float* out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(in) + i)), df, out + i);
  if (i < n) ref::from_f16(in + 2 * i, n - i, out + i);
}

// bf16 with integer ops: u + 0x7fff + ((u >> 16) & 1), then the top half.
void ToBF16(const float* x, int n, uint8_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(di)> du16;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, hn::LoadU(df, x + i));
    const auto r = hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
    // The top halves fit in 0..65535, so the signed saturating demote is exact.
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(r))), du16,
               reinterpret_cast<uint16_t*>(out) + i);
  }
  if (i < n) ref::to_bf16(x + i, n - i, out + 2 * i);
}

void FromBF16(const uint8_t* in, int n, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint16_t, decltype(du)> du16;
  const int N = static_cast<int>(hn::Lanes(df));
  int i = 0;
  for (; i + N <= n; i += N) {
    const auto h = hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(in) + i));
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(h)), df, out + i);
  }
  if (i < n) ref::from_bf16(in + 2 * i, n - i, out + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tkv {
HWY_EXPORT(RhtForward);
HWY_EXPORT(RhtInverse);
HWY_EXPORT(MatvecCols);
HWY_EXPORT(Sumsq);
HWY_EXPORT(EncodeCells);
HWY_EXPORT(DecodeCells);
HWY_EXPORT(QuantizeQ8_0);
HWY_EXPORT(QuantizeQ4_0);
HWY_EXPORT(ToF16);
HWY_EXPORT(ToBF16);
HWY_EXPORT(FromF16);
HWY_EXPORT(FromBF16);

namespace simd {
void rht_forward(const float* x, const float* sign, float scale, float* y, int d) {
  HWY_DYNAMIC_DISPATCH(RhtForward)(x, sign, scale, y, d);
}
void rht_inverse(const float* y, const float* sign, float scale, float* x, int d) {
  HWY_DYNAMIC_DISPATCH(RhtInverse)(y, sign, scale, x, d);
}
void matvec_cols(const float* m, const float* x, float* y, int d, int n) {
  HWY_DYNAMIC_DISPATCH(MatvecCols)(m, x, y, d, n);
}
float sumsq(const float* x, int d) { return HWY_DYNAMIC_DISPATCH(Sumsq)(x, d); }
void encode_cells(const float* y, int n, float inv, const float* bnd, int nb, uint8_t* codes) {
  HWY_DYNAMIC_DISPATCH(EncodeCells)(y, n, inv, bnd, nb, codes);
}
void decode_cells(const uint8_t* codes, int n, const float* cent, float scale, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeCells)(codes, n, cent, scale, out);
}
void quantize_q8_0(const float* x, int nblocks, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ8_0)(x, nblocks, out);
}
void quantize_q4_0(const float* x, int nblocks, uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(QuantizeQ4_0)(x, nblocks, out);
}
void to_f16(const float* x, int n, uint8_t* out) { HWY_DYNAMIC_DISPATCH(ToF16)(x, n, out); }
void to_bf16(const float* x, int n, uint8_t* out) { HWY_DYNAMIC_DISPATCH(ToBF16)(x, n, out); }
void from_f16(const uint8_t* in, int n, float* out) { HWY_DYNAMIC_DISPATCH(FromF16)(in, n, out); }
void from_bf16(const uint8_t* in, int n, float* out) { HWY_DYNAMIC_DISPATCH(FromBF16)(in, n, out); }
}  // namespace simd
}  // namespace tkv
#endif
