// Key scoring on 8-bit integers: the scalar specification and the AVX-512
// (VBMI + VNNI) kernel. Not Highway: Highway 1.0.3 (Debian 12) compiles no
// target with VBMI and VNNI by default, so the kernel carries its own target
// attribute and is picked at run time (int8_target(); the AVX2 kernels are in
// score_int8_avx2.cpp).
#include "attention/score_int8.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <cmath>
#include <limits>
#include <cstring>
#include <type_traits>
#include <vector>

#include "codec/kernels.h"
#include "util/env.h"

#if defined(__x86_64__) && !defined(TKV_NO_INT8_KEYS)
#include <immintrin.h>
#define TKV_INT8_KEYS_X86 1
#endif

namespace tkv::attn {

namespace {
// Mean squared error of the unit-Gaussian Lloyd-Max codebook at b bits (b = 0:
// the coordinate is not coded, its whole variance is the error).
constexpr double kLloydMax[9] = {1.0, 0.3634, 0.1175, 0.03454, 0.009497, 0.002499, 0.000642, 0.0001628, 0.0000410};
}  // namespace

// The centroid bytes (RESULTS §36). A codebook's centroids are fixed
// numbers, so rounding them to bytes is not noise: code j's centroid moves by
// its own e_j on every row. Two effects follow: the codec's error per
// coordinate grows by Σ_j p_j e_j² (p_j: how often code j is used), and
// Σ_j p_j c_j e_j ≠ 0 scales every score by a common gain, a softmax
// temperature. On ref-5m (d 64) the gain dominated: tq4's keys on one byte
// at cs = cmax/127 have a gain of −0.34 % and its KLD grew 3.6 %; scaled back
// by the least-squares scale instead, +1.5 %. So the bytes are
// c8_j = round(c_j / step) for the step in [cmax/127, 1.4·cmax/127]
// (|c8| <= 127 throughout) that leaves the least error Σ p_j (c_j − cs c8_j)²
// once scaled back by cs = Σ p c c8 / Σ p c8² (no gain: the error is
// orthogonal to c8), among the steps that keep every |c_j − cs c8_j| <= cs/2
// (the bound and the residual table rely on it); p_j are the cells of
// N(0, σ) for σ that makes the top centroid its cell's mean (the Lloyd-Max
// condition; equal p_j if no σ does). A 401-point grid, once per codebook:
// a thread's last 8 fits are kept (prepare runs on every attention call, per
// head with per-head codecs; a tqc8 fit is ~0.4 M operations).
namespace {
struct CentroidFit {
  std::vector<float> key;  // the bound, nparts, then per part: bits, count, the 2^bits centroids
  float step = 0.0f;       // c8 = round(c / step)
  float cs = 0.0f;         // c ≈ cs · c8
  double mse[RowLayout::kMaxParts] = {};  // Σ_j p_j (c_j − cs c8_j)² per part
  double var[RowLayout::kMaxParts] = {};  // the coordinate variance the part's codebook is for: Σ_j p_j c_j² / (1 − D(b))
};

// The probability of each code's cell under N(0, σ), σ from the top cell.
void cell_probabilities(const float* c, int n, double* prob) {
  std::vector<int> order(n);
  for (int j = 0; j < n; ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return c[a] < c[b]; });
  for (int j = 0; j < n; ++j) prob[j] = 1.0 / n;
  if (n < 2) return;
  const double top = c[order[n - 1]], t = 0.5 * (static_cast<double>(c[order[n - 2]]) + top);
  if (!(top > t)) return;
  // The mean of N(0, σ) above t rises with σ: bisect for the one equal to top.
  const double kInvSqrt2Pi = 0.3989422804014327;
  auto mean_above = [&](double sigma) {
    const double z = t / sigma, tail = 0.5 * std::erfc(z / std::sqrt(2.0));
    return tail > 0 ? sigma * std::exp(-0.5 * z * z) * kInvSqrt2Pi / tail : t;
  };
  double lo = top / 16, hi = top * 4;
  if (!(mean_above(lo) < top && mean_above(hi) > top)) return;
  for (int it = 0; it < 100; ++it) {
    const double mid = 0.5 * (lo + hi);
    (mean_above(mid) < top ? lo : hi) = mid;
  }
  const double sigma = 0.5 * (lo + hi);
  auto cdf = [&](double x) { return 0.5 * std::erfc(-x / (sigma * std::sqrt(2.0))); };
  for (int a = 0; a < n; ++a) {
    const double below = a == 0 ? 0.0 : cdf(0.5 * (static_cast<double>(c[order[a - 1]]) + c[order[a]]));
    const double above = a == n - 1 ? 1.0 : cdf(0.5 * (static_cast<double>(c[order[a]]) + c[order[a + 1]]));
    prob[order[a]] = std::max(0.0, above - below);
  }
}

long centroid_byte(float c, float step, long bound = 127) { return std::clamp(std::lround(c / step), -bound, bound); }

// bound: the largest |c8| (127; Int8Keys::kNarrow for AVX2's byte kernels).
const CentroidFit& fit_centroid_bytes(const RowLayout& L, float cmax, int bound) {
  thread_local std::vector<float> key;
  key.assign(1, static_cast<float>(bound));
  key.push_back(static_cast<float>(L.nparts));
  for (int p = 0; p < L.nparts; ++p) {
    key.push_back(static_cast<float>(L.parts[p].bits));
    key.push_back(static_cast<float>(L.parts[p].count));
    key.insert(key.end(), L.parts[p].centroids, L.parts[p].centroids + (1 << L.parts[p].bits));
  }
  thread_local CentroidFit fits[8];
  thread_local int next = 0;
  for (const CentroidFit& f : fits)
    if (f.key == key) return f;
  CentroidFit& f = fits[next];
  next = (next + 1) % 8;
  f.key = key;
  std::vector<double> prob[RowLayout::kMaxParts];
  for (int p = 0; p < L.nparts; ++p) {
    prob[p].resize(size_t{1} << L.parts[p].bits);
    cell_probabilities(L.parts[p].centroids, 1 << L.parts[p].bits, prob[p].data());
  }
  // The error left at one step (parts weighted by their coordinates) once
  // scaled back by its least-squares scale; +inf where some centroid would
  // lie more than half that scale away (the bound, int8_score_bound, and the
  // residual table rely on |c − cs c8| <= cs/2).
  auto error = [&](float step, float* cs_out) {
    double cc = 0, c8c = 0, c8c8 = 0;
    for (int p = 0; p < L.nparts; ++p)
      for (int j = 0; j < (1 << L.parts[p].bits); ++j) {
        const double w = L.parts[p].count * prob[p][j], c = L.parts[p].centroids[j];
        const double c8 = static_cast<double>(centroid_byte(L.parts[p].centroids[j], step, bound));
        cc += w * c * c;
        c8c += w * c8 * c;
        c8c8 += w * c8 * c8;
      }
    const float cs = c8c8 > 0 ? static_cast<float>(c8c / c8c8) : step;
    for (int p = 0; p < L.nparts; ++p)
      for (int j = 0; j < (1 << L.parts[p].bits); ++j) {
        const float c = L.parts[p].centroids[j];
        if (!(std::fabs(c - cs * static_cast<float>(centroid_byte(c, step, bound))) <= 0.5f * cs)) return HUGE_VAL;
      }
    *cs_out = cs;
    return cc - static_cast<double>(cs) * c8c;  // Σ w (c − cs c8)²
  };
  // Step cmax/bound scaled back by itself (the plain rounding) always qualifies.
  f.step = f.cs = static_cast<float>(cmax / bound);
  double best = HUGE_VAL;
  for (int g = 0; g <= 400; ++g) {
    const float step = static_cast<float>(cmax / bound * (1.0 + 0.4 * g / 400));
    float cs;
    const double e = error(step, &cs);
    if (e < best) {
      best = e;
      f.step = step;
      f.cs = cs;
    }
  }
  for (int p = 0; p < L.nparts; ++p) {
    f.mse[p] = 0;
    double cc = 0;
    for (int j = 0; j < (1 << L.parts[p].bits); ++j) {
      const double e =
          L.parts[p].centroids[j] - static_cast<double>(f.cs) * centroid_byte(L.parts[p].centroids[j], f.step, bound);
      f.mse[p] += prob[p][j] * e * e;
      cc += prob[p][j] * static_cast<double>(L.parts[p].centroids[j]) * L.parts[p].centroids[j];
    }
    // (A Lloyd-Max codebook's centroids hold 1 − D of the variance.)
    f.var[p] = cc / (1.0 - kLloydMax[std::clamp<int>(L.parts[p].bits, 1, 8)]);
  }
  return f;
}
}  // namespace

void int8_keys_prepare(const RowLayout& L, int d, int dp, const float* coord_scale, Int8Keys& k,
                       double residual_above, bool allow_narrow, Int8Side side) {
  k = Int8Keys{};
  k.d = d;
  k.dp = dp;
  if (L.kind != RowLayout::Kind::kTurbo || L.nparts < 1 || dp > 1024) return;
  float cmax = 0.0f;
  for (int p = 0; p < L.nparts; ++p)
    for (int j = 0; j < (1 << L.parts[p].bits); ++j) cmax = std::max(cmax, std::fabs(L.parts[p].centroids[j]));
  if (!(cmax > 0.0f) || !std::isfinite(cmax)) return;
  k.cmax = cmax;
  // (Fixed arrays, dp <= 1024 above: attention() prepares its readers on
  // every call, so no allocation here.)
  int8_t part_of[1024];
  std::memset(part_of, -1, sizeof(part_of));
  for (int p = 0; p < L.nparts; ++p)
    for (int i = L.parts[p].begin; i < L.parts[p].begin + L.parts[p].count && i < d; ++i)
      part_of[i] = static_cast<int8_t>(p);
  bool aligned = dp % 64 == 0;
  for (int p = 0; p < L.nparts; ++p)
    aligned = aligned && L.parts[p].begin % 64 == 0 && L.parts[p].count % 64 == 0;
  int total = 0;
  for (int p = 0; p < L.nparts; ++p) total += L.parts[p].count;
  k.aligned = aligned && total == dp;
  // TKV_INT8_LANES=0: no lane kernels, no ordered decode (comparisons).
  static const bool lanes_on = env_switch_on("TKV_INT8_LANES");
  // The AVX2 ordered decode's layouts (score_int8.h): one part of 2-bit
  // codes (+ a 1-bit plane) or of 4-bit codes over dp.
  const RowLayout::Part& p0 = L.parts[0];
  const RowLayout::Plane* pl0 = p0.planes;
  if (lanes_on && k.aligned && L.nparts == 1 && pl0[0].shift == 0) {  // (aligned: dp % 64 == 0; dp <= 1024 above)
    if (p0.bits == 2 && p0.nplanes == 1 && pl0[0].width == 2) k.avx2_sig = 20;
    if (p0.bits == 3 && p0.nplanes == 2 && pl0[0].width == 2 && pl0[1].width == 1 && pl0[1].shift == 2) k.avx2_sig = 21;
    if (p0.bits == 4 && p0.nplanes == 1 && pl0[0].width == 4) k.avx2_sig = 40;
  }
  // AVX2's byte kernels (Int8Keys::narrow) take its ordered decode's 2-bit
  // layouts (tq2, tq3) when the bytes on kNarrow still predict less than
  // residual_above; else 127.
  // V's tables for tq4 (avx2_sig 40) take ±kNarrowV when the centroid
  // bytes' share alone is at most kInt8ValueMax.
  const bool avx2 = allow_narrow && int8_target() == Int8Target::kAvx2;
  const bool narrow_layout = avx2 && (k.avx2_sig == 20 || k.avx2_sig == 21);
  const bool narrow_values = avx2 && side == Int8Side::kValues && k.avx2_sig == 40;
  double codec = 0, smax = 0, qvar = 0;  // (the wide path below reads them too)
  int covered = 0;
  for (const int bound : {Int8Keys::kNarrow, Int8Keys::kNarrowV, 127}) {
    if (bound == Int8Keys::kNarrow && !narrow_layout) continue;
    if (bound == Int8Keys::kNarrowV && !narrow_values) continue;
    const CentroidFit& fit = fit_centroid_bytes(L, cmax, bound);
    k.cs = fit.cs;
    k.bound = bound;
    k.narrow = bound == Int8Keys::kNarrow;
    k.residual = false;
    for (int p = 0; p < L.nparts; ++p) {
      std::memset(k.table[p], 128, sizeof(k.table[p]));
      for (int j = 0; j < (1 << L.parts[p].bits); ++j)
        k.table[p][j] = static_cast<uint8_t>(centroid_byte(L.parts[p].centroids[j], fit.step, bound) + 128);
    }
    // The predicted error this path adds, as a fraction of the codec's own
    // score error variance, for a query with unit variance per coordinate
    // before the coordinate scale s_i, in the codebook's units (var(p): the
    // coordinate variance part p's codebook is for, 1/d for tq, ~1 for tqc
    // whose s_i carry the scale): codec Σ s_i² D(b_i) var; centroid bytes
    // Σ s_i² mse(part of i) (the fit's, above); query bytes (qs²/12) ·
    // Σ var (1 − D) (the centroids' second moment) with qs ≈ 3 max s_i / 127
    // (a rotated query's largest coordinate is ~3x its RMS). With residual
    // bytes both shares are those of a uniform error of a 254 times finer
    // step (the residual table's centroid errors are not fitted: they are
    // ~254² times smaller). V's measure (value_share) is the centroid bytes'
    // share alone: V has no query bytes. (Until RESULTS §41 the centroid
    // term was left in the codebook's units over a codec at unit variance:
    // d times too small for tq.)
    double centroid = 0, uniform = 0;
    codec = smax = qvar = 0;
    covered = 0;
    for (int i = 0; i < d; ++i) {
      const double s = coord_scale ? coord_scale[i] : 1.0;
      const int p = part_of[i];
      const double var = fit.var[std::max(p, 0)];  // (a coordinate no part covers: its whole variance)
      codec += s * s * kLloydMax[p >= 0 ? std::clamp<int>(L.parts[p].bits, 0, 8) : 0] * var;
      if (p < 0) continue;
      centroid += s * s * fit.mse[p];
      uniform += s * s * k.cs * k.cs / 12.0;
      qvar += var * (1.0 - kLloydMax[std::clamp<int>(L.parts[p].bits, 0, 8)]);
      smax = std::max(smax, std::fabs(s));
      ++covered;
    }
    const double qs = 3.0 * smax / 127.0;
    k.predicted = codec > 0 ? (centroid + qs * qs / 12.0 * qvar) / codec : 1e30;
    k.value_share = codec > 0 ? centroid / codec : 1e30;
    if (k.narrow && k.predicted <= residual_above) break;
    if (bound == Int8Keys::kNarrowV) {  // (V: no query bytes)
      if (k.value_share <= kInt8ValueMax) break;
      continue;
    }
    if (k.predicted > residual_above) {  // residual bytes make both shares ~254² times smaller
      k.residual = true;
      k.predicted = codec > 0 ? (uniform + qs * qs / 12.0 * qvar) / (254.0 * 254.0) / codec : 1e30;
    }
  }
  // One 4-bit part in one plane over dp = 64, 128 or 256: 16-bit words
  // instead of residual bytes (int8_dots16; about half the operations).
  if (k.residual && k.aligned && L.nparts == 1 && p0.bits == 4 && p0.nplanes == 1 && p0.planes[0].width == 4 &&
      p0.planes[0].shift == 0 && (dp == 64 || dp == 128 || dp == 256)) {
    k.residual = false;
    k.wide = true;
    k.wmax = static_cast<int>(std::sqrt(2147483647.0 / dp));
    while (static_cast<double>(dp) * k.wmax * k.wmax >= 2147483648.0) --k.wmax;
    k.cs16 = cmax / static_cast<float>(k.wmax);
    for (int j = 0; j < 16; ++j) {
      const long c16 = std::lround(p0.centroids[j] / k.cs16);
      k.table16[j] = static_cast<int16_t>(std::clamp(c16, -static_cast<long>(k.wmax), static_cast<long>(k.wmax)));
    }
    const double qs16 = 3.0 * smax / k.wmax;
    double cw = 0;
    for (int i = 0; i < d; ++i) {
      const double sc = coord_scale ? coord_scale[i] : 1.0;
      if (part_of[i] >= 0) cw += sc * sc * k.cs16 * k.cs16 / 12.0;
    }
    k.predicted = codec > 0 ? (cw + qs16 * qs16 / 12.0 * qvar) / codec : 1e30;
  }
  k.usable = k.predicted <= kInt8MaxPredicted;
  // V reads one byte a centroid (no residual bytes): above kInt8ValueMax it
  // keeps f32 (tq5 and up: tq8's ref-5m KLD grew 67 % on one byte, RESULTS
  // §41).
  if (side == Int8Side::kValues) k.usable = k.usable && k.value_share <= kInt8ValueMax;
  // The AVX2 ordered decode's tables (score_int8.h): lane 0's table reads
  // the index bits the kernel puts code s = 0 (and 2) in, lane 1's those of
  // s = 1 (and 3); bits the kernel does not clear repeat it.
  if (k.avx2_sig) {
    for (int x = 0; x < 16; ++x) {
      int c0 = x, c1 = x;  // sig 40: the nibble itself, both lanes
      if (k.avx2_sig == 20) c0 = x & 3, c1 = x >> 2;                            // (V & 15): codes 4b+s, 4b+s+1
      if (k.avx2_sig == 21) c0 = x & 7, c1 = ((x >> 2) & 3) + 4 * ((x >> 1) & 1);  // low bits | high bit at 2, or 1
      k.avx2_table[x] = k.table[0][c0];
      k.avx2_table[16 + x] = k.table[0][c1];
    }
    for (int x = 0; x < 32; ++x) k.avx2_vtable[x] = static_cast<uint8_t>(k.avx2_table[x] ^ 0x80);
    if (k.narrow)  // c8 + 32 in [1, 63]
      for (int x = 0; x < 32; ++x) k.avx2_ntable[x] = static_cast<uint8_t>(k.avx2_table[x] - 96);
  }
  // The pair tables (score_int8.h): their rounding adds dp/2 uniform errors
  // of step sL to a score, sL = cmax · m / 127 with m ≈ 6 smax (two
  // coordinates of a rotated query at ~3x their RMS: pessimistic; measured
  // 0.0008 of the codec's variance where this predicts 0.0018, tq2 d 128,
  // RESULTS §42). Held to the residual threshold like one byte of K.
  static const bool lut_on = env_switch_on("TKV_INT8_LUT");
  if (lut_on && side == Int8Side::kKeys && int8_target() == Int8Target::kAvx2 && k.avx2_sig == 20 && dp <= kLutMaxDp && k.usable && !k.residual &&
      !k.wide && codec > 0) {
    const double sL = cmax * 6.0 * smax / 127.0;
    k.lut_predicted = covered / 2.0 * sL * sL / 12.0 / codec;
    k.lut = k.lut_predicted <= residual_above;
    for (int j = 0; j < 4; ++j) k.lut_c[j] = p0.centroids[j];
  }
  // V's pair tables (score_int8.h): r's rounding, uniform within 1/2 of
  // cs · 128 · ws, against a row's codec error at the block's maximum
  // weight (ws · 255): covered · (cs · 128 / 255)² / 12 over codec.
  static const bool vlut_on = env_switch_on("TKV_INT8_VLUT");
  if (vlut_on && side == Int8Side::kValues && int8_target() == Int8Target::kAvx2 && k.avx2_sig == 20 &&
      dp <= kLutMaxDp && k.usable && k.bound <= Int8Keys::kNarrow && codec > 0) {
    const double u = k.cs * 128.0 / 255.0;
    k.vlut_predicted = covered * u * u / 12.0 / codec;
    k.vlut = k.vlut_predicted <= kInt8ValueMax;
  }
  // The ordered AVX-512 kernels' layouts (score_int8.h): one part, a 2-bit
  // plane (+ a 1-bit one), or one 4-bit plane at dp 128 and 256.
  if (!lanes_on || !k.aligned || L.nparts != 1 || !(dp == 64 || dp == 128 || dp == 256)) return;
  const int w0 = p0.planes[0].width, w1 = p0.nplanes > 1 ? p0.planes[1].width : 0;
  if (p0.planes[0].shift != 0 || p0.nplanes > 2 || (p0.nplanes == 2 && p0.planes[1].shift != w0)) return;
  // (4-bit codes in the lane kernels, keys on words and values on bytes, ran
  // 7 and 12 % slower than the row kernels, RESULTS §33; the transposed keys
  // and values_nib4 that take them now are faster, §45.)
  const bool two = w0 == 2 && (w1 == 0 || w1 == 1);
  // 4-bit codes (tq4) at dp 128 and 256: keys on the transposed kernel and
  // values on values_nib4, in AVX2's nibble order (fill_order).
  const bool nib = w0 == 4 && w1 == 0 && dp != 64;
  k.lanes_values = two || nib;
  k.lanes_dots = (two || nib) && !k.residual && !k.wide;
  for (int x = 0; x < 64; ++x) {  // the codes' bits below 6 not theirs are ignored: the table repeats
    k.lanes_table[x] = k.table[0][x % (nib ? 16 : 4 << w1)];
    k.lanes_vtable[x] = static_cast<uint8_t>(k.lanes_table[x] ^ 0x80);
  }
  if (two)
    for (int x = 0; x < 64; ++x) {
      const int code[2] = {(x & 3) | (x >> 4 & 1) << 2, (x >> 2 & 3) | (x >> 5 & 1) << 2};
      for (int t = 0; t < 2; ++t) {
        k.lanes_t2[t][x] = k.lanes_table[code[t]];
        k.lanes_vt2[t][x] = k.lanes_vtable[code[t]];
      }
    }
}

float int8_quantize_query_ref(const float* q, int dp, int8_t* q8, int32_t* bias) {
  float m = 0.0f;
  for (int i = 0; i < dp; ++i) m = std::max(m, std::fabs(q[i]));
  const float qs = m / 127.0f;
  int32_t sum = 0;
  for (int i = 0; i < dp; ++i) {
    // Nearest, ties to even (the vector conversion's rounding): |q/qs| <= 127.
    const float v = qs > 0.0f ? std::nearbyint(q[i] / qs) : 0.0f;
    q8[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    sum += q8[i];
  }
  *bias = 128 * sum;
  return qs;
}

void int8_residual_table(const Int8Keys& k, const RowLayout& L, Int8Keys& r) {
  r = k;
  r.cs = k.cs / 254.0f;
  r.narrow = false;  // (its bytes span ±127)
  r.bound = 127;
  for (int p = 0; p < L.nparts; ++p) {
    std::memset(r.table[p], 128, sizeof(r.table[p]));
    for (int j = 0; j < (1 << L.parts[p].bits); ++j) {
      const float back = static_cast<float>(int(k.table[p][j]) - 128) * k.cs;
      const long c8 = std::lround((L.parts[p].centroids[j] - back) / r.cs);
      r.table[p][j] = static_cast<uint8_t>(std::clamp(c8, -127L, 127L) + 128);
    }
  }
}

float int8_quantize_residual_ref(const float* q, int dp, float qs, const int8_t* q8, int8_t* r8, int32_t* bias) {
  const float qr = qs / 254.0f;
  int32_t sum = 0;
  for (int i = 0; i < dp; ++i) {
    // q − qs·q8 by one fused multiply-add (the kernel computes the same).
    const float v = qr > 0.0f ? std::nearbyint(std::fma(-qs, static_cast<float>(q8[i]), q[i]) / qr) : 0.0f;
    r8[i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    sum += r8[i];
  }
  *bias = 128 * sum;
  return qr;
}

float int8_quantize_query16_ref(const float* q, int dp, int wmax, int16_t* q16) {
  float m = 0.0f;
  for (int i = 0; i < dp; ++i) m = std::max(m, std::fabs(q[i]));
  const float qs = m / static_cast<float>(wmax);
  for (int i = 0; i < dp; ++i) {
    const float v = qs > 0.0f ? std::nearbyint(q[i] / qs) : 0.0f;
    q16[i] = static_cast<int16_t>(std::clamp(v, -static_cast<float>(wmax), static_cast<float>(wmax)));
  }
  return qs;
}

void int8_dots16_ref(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int16_t* q16,
                     int G, int32_t* dots, int ld) {
  const RowLayout::Part& part = L.parts[0];
  uint8_t codes[1024];
  for (int r = 0; r < n; ++r) {
    std::memset(codes, 0, sizeof(codes));
    unpack_plane_or(rows[r] + part.planes[0].offset, part.count, part.planes[0].width, part.planes[0].shift,
                    codes + part.begin);
    for (int j = 0; j < G; ++j) {
      int32_t s = 0;
      for (int i = 0; i < k.dp; ++i) s += int32_t{k.table16[codes[i] & 15]} * q16[static_cast<size_t>(j) * k.dp + i];
      dots[static_cast<size_t>(j) * ld + r] = s;
    }
  }
}

void int8_dots_ref(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int8_t* q8, int G,
                   int32_t* dots, int ld) {
  uint8_t codes[1024], bytes[1024];
  for (int r = 0; r < n; ++r) {
    std::memset(codes, 0, sizeof(codes));
    std::memset(bytes, 128, sizeof(bytes));  // coordinates no part covers: centroid 0
    for (int p = 0; p < L.nparts; ++p) {
      const RowLayout::Part& part = L.parts[p];
      for (int pl = 0; pl < part.nplanes; ++pl)
        unpack_plane_or(rows[r] + part.planes[pl].offset, part.count, part.planes[pl].width, part.planes[pl].shift,
                        codes + part.begin);
      for (int i = 0; i < part.count; ++i) bytes[part.begin + i] = k.table[p][codes[part.begin + i]];
    }
    for (int j = 0; j < G; ++j) {
      int32_t s = 0;
      for (int i = 0; i < k.dp; ++i) s += static_cast<int32_t>(bytes[i]) * q8[static_cast<size_t>(j) * k.dp + i];
      dots[static_cast<size_t>(j) * ld + r] = s;
    }
  }
}

double int8_score_bound(const Int8Keys& k, const float* q, int dp, float qs) {
  double sq = 0;
  for (int i = 0; i < dp; ++i) sq += std::fabs(q[i]);
  if (k.wide) return 0.5 * qs * k.d * k.cmax + 0.5 * k.cs16 * sq + 0.25 * k.d * static_cast<double>(qs) * k.cs16;
  if (!k.residual) return 0.5 * qs * k.d * k.cmax + 0.5 * k.cs * sq + 0.25 * k.d * static_cast<double>(qs) * k.cs;
  // Two bytes each: q' = qs q8 + qr r8 + eq, c = cs c8 + cr cr8 + ec with
  // |eq| <= qr/2, |ec| <= cr/2, |qr r8| <= (qs + qr)/2, |cr cr8| <= (cs + cr)/2;
  // the kernel leaves out qr r8 · cr cr8 and every term with eq or ec.
  const double qr = qs / 254.0, cr = k.cs / 254.0;
  return 0.5 * qr * k.d * k.cmax + 0.5 * cr * sq + 0.25 * k.d * qr * cr +
         k.d * 0.5 * (qs + qr) * 0.5 * (k.cs + cr) + 0.5 * qr * k.d * 0.5 * (k.cs + cr) + 0.5 * cr * k.d * 0.5 * (qs + qr);
}

float int8_lut_scale(const Int8Keys& k, const float* q, float* inv) {
  const float cmax = k.cmax;  // (the one part's max |c_j|: max |lut_c|)
  float m = 0.0f;
  bool nan = false;
  for (int P = 0; P < k.dp / 2; ++P) {
    nan |= q[2 * P] != q[2 * P] || q[2 * P + 1] != q[2 * P + 1];
    m = std::max(m, (std::fabs(q[2 * P]) + std::fabs(q[2 * P + 1])) * cmax);
  }
  // Below 1e-30 (127/m would overflow) the query scores 0 against every row;
  // a NaN coordinate makes sL NaN, so its scores are NaN as on the exact path.
  *inv = m >= 1e-30f ? 127.0f / m : 0.0f;
  return nan ? std::numeric_limits<float>::quiet_NaN() : m >= 1e-30f ? m / 127.0f : 0.0f;
}

float int8_lut_build_ref(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias) {
  const int np = k.dp / 2;
  *bias = 128 * np;
  float inv;
  const float sL = int8_lut_scale(k, q, &inv);
  for (int P = 0; P < np; ++P)
    for (int x = 0; x < 16; ++x) {
      const float e = std::fma(q[2 * P + 1], k.lut_c[x >> 2], q[2 * P] * k.lut_c[x & 3]);
      const float v = std::nearbyint(e * inv);  // (|e| <= m up to rounding: the clamp is for that ulp)
      const uint8_t b = static_cast<uint8_t>(static_cast<int>(v == v ? std::clamp(v, -127.0f, 127.0f) : 0.0f) + 128);
      lut[32 * static_cast<size_t>(P) + x] = lut[32 * static_cast<size_t>(P) + 16 + x] = b;
    }
  return sL;
}

void int8_lut_dots_ref(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const uint8_t* lut,
                       int G, int32_t* dots, int ld) {
  const size_t o0 = L.parts[0].planes[0].offset, lb = int8_lut_bytes(k.dp);
  for (int j = 0; j < G; ++j)
    for (int r = 0; r < n; ++r) {
      int32_t s = 0;
      for (int P = 0; P < k.dp / 2; ++P) {
        const int x = (rows[r][o0 + P / 2] >> (4 * (P % 2))) & 15;
        s += lut[j * lb + 32 * static_cast<size_t>(P) + x];
      }
      dots[static_cast<size_t>(j) * ld + r] = s;
    }
}

float int8_weights(const float* w, int n, uint8_t* w8) {
  float m = 0.0f;
  for (int r = 0; r < n; ++r) m = std::max(m, w[r]);
  if (!(m > 0.0f)) {
    std::fill(w8, w8 + n, uint8_t{0});
    return 0.0f;
  }
  const float inv = 255.0f / m;
  if (!(inv <= std::numeric_limits<float>::max())) {
    // m below 255 / FLT_MAX (~7.5e-37: every row of the block ~83 below the
    // running max in the exponent, times a small row scale): the bytes
    // would be w · inf, whose conversion to int is undefined in C++; they
    // are 0 (x86's conversion of inf gave INT_MIN, its low byte 0), and the
    // scale 0: the query adds nothing (the kernels alike).
    std::fill(w8, w8 + n, uint8_t{0});
    return 0.0f;
  }
  // w >= 0: adding one half and truncating rounds half up (lround's result
  // for these values) without a libm call per weight (lroundf was 7% of a
  // 64K decode step).
  // (An explicit fused multiply-add: the AVX-512 kernel computes the same.)
  for (int r = 0; r < n; ++r) w8[r] = static_cast<uint8_t>(std::min(255, static_cast<int>(std::fma(w[r], inv, 0.5f))));
  return m / 255.0f;
}

void int8_values_ref(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const float* w, int G,
                     int ldw, float* acc) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * k.dp, 128);
  uint8_t codes[1024];
  for (int r = 0; r < n; ++r) {
    std::memset(codes, 0, sizeof(codes));
    for (int p = 0; p < L.nparts; ++p) {
      const RowLayout::Part& part = L.parts[p];
      for (int pl = 0; pl < part.nplanes; ++pl)
        unpack_plane_or(rows[r] + part.planes[pl].offset, part.count, part.planes[pl].width, part.planes[pl].shift,
                        codes + part.begin);
      for (int i = 0; i < part.count; ++i) bytes[static_cast<size_t>(r) * k.dp + part.begin + i] = k.table[p][codes[part.begin + i]];
    }
  }
  std::vector<uint8_t> w8(n);
  for (int j = 0; j < G; ++j) {
    const float ws = int8_weights(w + static_cast<size_t>(j) * ldw, n, w8.data());
    if (ws == 0.0f) continue;
    const float f = ws * k.cs;
    for (int i = 0; i < k.dp; ++i) {
      int32_t a = 0;
      for (int r = 0; r < n; ++r) a += int32_t(w8[r]) * (int32_t(bytes[static_cast<size_t>(r) * k.dp + i]) - 128);
      acc[static_cast<size_t>(j) * k.dp + i] += static_cast<float>(a) * f;
    }
  }
}

// V's pair tables (score_int8.h, Int8Keys::vlut): per query a row's four
// products in bytes r = (w8 · c8 + 64) >> 7, two rows' sums per pair of
// codes in one table, the sums of table entries per coordinate.
void int8_vlut_values_ref(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const float* w,
                          int G, int ldw, float* acc) {
  const size_t o0 = L.parts[0].planes[0].offset;
  const int np = (n + 1) / 2;
  std::vector<uint8_t> w8(2 * static_cast<size_t>(np), 0);
  for (int j = 0; j < G; ++j) {
    const float ws = int8_weights(w + static_cast<size_t>(j) * ldw, n, w8.data());
    if (ws == 0.0f) continue;
    const float f = ws * k.cs * 128.0f;
    for (int i = 0; i < k.dp; ++i) {
      int32_t s = 0;
      for (int P = 0; P < np; ++P) {
        const int ra = 2 * P, rb = std::min(2 * P + 1, n - 1);  // (an odd n: the last row again, weight 0)
        const int a = (rows[ra][o0 + i / 4] >> (2 * (i % 4))) & 3, b = (rows[rb][o0 + i / 4] >> (2 * (i % 4))) & 3;
        const int x = a | b << 2;
        auto r = [&](int row, int code) { return (int32_t(w8[row]) * (int32_t(k.table[0][code]) - 128) + 64) >> 7; };
        s += r(ra, x & 3) + r(2 * P + 1, x >> 2) + 128;  // the table entry T[x]
      }
      acc[static_cast<size_t>(j) * k.dp + i] += static_cast<float>(s - 128 * np) * f;
    }
  }
}

#if TKV_INT8_KEYS_X86
#define TKV_AVX512_INT8 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,avx512vnni")))

bool int8_avx512_cpu() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vnni");
  return ok;
}

namespace {

// int8_quantize_query(_ref) on 16 floats at a time: the same divisions and
// round-to-nearest-even conversions, so the same bytes. (Per decode step it
// runs once per query head: as lroundf calls, once per work item, it was
// 11 % of a 64K step.)
TKV_AVX512_INT8 inline __mmask16 tail16(int i, int dp) {
  return dp - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (dp - i)) - 1);
}

TKV_AVX512_INT8 float quantize_query_avx512(const float* q, int dp, int8_t* q8, int32_t* bias) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < dp; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail16(i, dp), q + i)));
  const float qs = _mm512_reduce_max_ps(m) / 127.0f;
  if (!(qs > 0.0f)) {
    std::memset(q8, 0, dp);
    *bias = 0;
    return qs;
  }
  const __m512 vqs = _mm512_set1_ps(qs);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  __m512i sum = _mm512_setzero_si512();
  for (int i = 0; i < dp; i += 16) {
    const __mmask16 t = tail16(i, dp);
    const __m512 x = _mm512_maskz_loadu_ps(t, q + i);
    const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, vqs)), lo), hi);
    sum = _mm512_add_epi32(sum, v);
    _mm512_mask_cvtepi32_storeu_epi8(q8 + i, t, v);
  }
  *bias = 128 * _mm512_reduce_add_epi32(sum);
  return qs;
}

TKV_AVX512_INT8 float quantize_residual_avx512(const float* q, int dp, float qs, const int8_t* q8, int8_t* r8,
                                               int32_t* bias) {
  const float qr = qs / 254.0f;
  if (!(qr > 0.0f)) {
    std::memset(r8, 0, dp);
    *bias = 0;
    return qr;
  }
  const __m512 vqs = _mm512_set1_ps(qs), vqr = _mm512_set1_ps(qr);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  __m512i sum = _mm512_setzero_si512();
  for (int i = 0; i < dp; i += 16) {
    const __mmask16 t = tail16(i, dp);
    const __m512 x = _mm512_maskz_loadu_ps(t, q + i);
    const __m512 b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(t, q8 + i)));
    const __m512 e = _mm512_fnmadd_ps(vqs, b, x);
    const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_div_ps(e, vqr)), lo), hi);
    sum = _mm512_add_epi32(sum, v);
    _mm512_mask_cvtepi32_storeu_epi8(r8 + i, t, v);
  }
  *bias = 128 * _mm512_reduce_add_epi32(sum);
  return qr;
}

TKV_AVX512_INT8 float quantize_query16_avx512(const float* q, int dp, int wmax, int16_t* q16) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < dp; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail16(i, dp), q + i)));
  const float qs = _mm512_reduce_max_ps(m) / static_cast<float>(wmax);
  if (!(qs > 0.0f)) {
    std::memset(q16, 0, sizeof(int16_t) * dp);
    return qs;
  }
  const __m512 vqs = _mm512_set1_ps(qs);
  const __m512i lo = _mm512_set1_epi32(-wmax), hi = _mm512_set1_epi32(wmax);
  for (int i = 0; i < dp; i += 16) {
    const __mmask16 t = tail16(i, dp);
    const __m512 x = _mm512_maskz_loadu_ps(t, q + i);
    const __m512i v = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_div_ps(x, vqs)), lo), hi);
    _mm512_mask_cvtepi32_storeu_epi16(q16 + i, t, v);
  }
  return qs;
}

// Chunk constants per plane width w in {1, 2, 4}: output qword m (coordinates
// 8m .. 8m+7 of a 64-coordinate chunk, 8w bits at bit 8mw of the plane)
// takes source qword 8mw / 64, and its byte b the w bits at (8mw mod 64) + bw.
struct Unpack {
  __m512i idx[3], ctrl[3], mask[3];
};

TKV_AVX512_INT8 void make_unpack(Unpack& u) {
  for (int wi = 0; wi < 3; ++wi) {
    const int w = 1 << wi;
    alignas(64) uint64_t idx[8];
    alignas(64) uint8_t ctrl[64];
    for (int m = 0; m < 8; ++m) {
      idx[m] = static_cast<uint64_t>(8 * m * w / 64);
      for (int b = 0; b < 8; ++b) ctrl[8 * m + b] = static_cast<uint8_t>((8 * m * w) % 64 + b * w);
    }
    u.idx[wi] = _mm512_load_si512(idx);
    u.ctrl[wi] = _mm512_load_si512(ctrl);
    u.mask[wi] = _mm512_set1_epi8(static_cast<char>((1 << w) - 1));
  }
}

// Centroid bytes (c8 + 128) of `valid` (1..64) coordinates of one part,
// starting at coordinate 64 * chunk of the part; bytes past `valid` are
// unspecified.
TKV_AVX512_INT8 inline __m512i chunk_bytes(const Unpack& u, const RowLayout::Part& part, const __m512i* tab, int bits,
                                           const uint8_t* row, int chunk, int valid) {
  __m512i code = _mm512_setzero_si512();
  for (int pl = 0; pl < part.nplanes; ++pl) {
    const int w = part.planes[pl].width;
    const uint8_t* src = row + part.planes[pl].offset + static_cast<size_t>(chunk) * 8 * w;
    const int nbytes = (valid * w + 7) / 8;
    const __mmask64 lm = nbytes >= 64 ? ~__mmask64{0} : ((__mmask64{1} << nbytes) - 1);
    __m512i v = _mm512_maskz_loadu_epi8(lm, src);
    if (w < 8) {
      const int wi = w == 1 ? 0 : w == 2 ? 1 : 2;
      v = _mm512_and_si512(_mm512_multishift_epi64_epi8(u.ctrl[wi], _mm512_permutexvar_epi64(u.idx[wi], v)),
                           u.mask[wi]);
    }
    // Codes < 2^(8 - shift): a 16-bit shift moves no bit across a byte.
    if (const int s = part.planes[pl].shift) v = _mm512_sll_epi16(v, _mm_cvtsi32_si128(s));
    code = _mm512_or_si512(code, v);
  }
  if (bits <= 6) return _mm512_permutexvar_epi8(code, tab[0]);
  const __m512i lo = _mm512_permutex2var_epi8(tab[0], code, tab[1]);
  if (bits == 7) return lo;
  const __m512i hi = _mm512_permutex2var_epi8(tab[2], code, tab[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(code), lo, hi);
}

// Sums of the 16 lanes of 4 vectors, in one 4-lane vector (a, b, c, d).
TKV_AVX512_INT8 inline __m128i sum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  // 512 -> 256: add halves, pairing (a, b) and (c, d) in one vector each.
  const __m512i ab = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
  const __m512i cd = _mm512_add_epi32(_mm512_shuffle_i64x2(c, d, 0x44), _mm512_shuffle_i64x2(c, d, 0xEE));
  // ab: [a0 a1 b0 b1] 128-bit blocks holding partial sums; fold blocks 0+1, 2+3.
  const __m512i abcd = _mm512_add_epi32(_mm512_shuffle_i64x2(ab, cd, 0x88), _mm512_shuffle_i64x2(ab, cd, 0xDD));
  // abcd blocks: [a, b, c, d] (each 4 partial sums): transpose-add within blocks.
  const __m512i t1 = _mm512_add_epi32(abcd, _mm512_shuffle_epi32(abcd, _MM_PERM_BADC));
  const __m512i t2 = _mm512_add_epi32(t1, _mm512_shuffle_epi32(t1, _MM_PERM_CDAB));
  // Each block now holds its sum in every lane: take lane 0 of each block.
  const __m512i pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(pick, t2));
}

}  // namespace

// One 64-coordinate chunk of a part with planes W0 (shift 0) and W1 (shift
// W0, or none): codes in bytes. The chunk's plane bytes lie inside the row.
template <int W>
TKV_AVX512_INT8 inline __m512i plane_chunk(const uint8_t* src, __m512i idx, __m512i ctrl, __m512i mask) {
  __m512i v;
  if constexpr (W == 8) return _mm512_loadu_si512(src);
  if constexpr (W == 4) v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  if constexpr (W == 2) v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  if constexpr (W == 1) v = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(ctrl, _mm512_permutexvar_epi64(idx, v)), mask);
}

constexpr int wi_of(int w) { return w == 1 ? 0 : w == 2 ? 1 : 2; }

// Rows of one part covering [0, dp), dp a multiple of 64, codes of at most 6
// bits: centroid bytes of n rows into stage[r * dp].
// With table2 and stage2, the same codes read through a second table too
// (the centroids' residual bytes): one unpacking, two lookups.
template <int W0, int W1>
TKV_AVX512_INT8 void decode_fixed(const Unpack& u, const RowLayout::Part& part, const uint8_t* table,
                                  const uint8_t* const* rows, int n, int dp, uint8_t* stage,
                                  const uint8_t* table2 = nullptr, uint8_t* stage2 = nullptr) {
  const __m512i tab = _mm512_loadu_si512(table);
  const __m512i tab2 = _mm512_loadu_si512(table2 ? table2 : table);
  const __m512i i0 = u.idx[wi_of(W0)], c0 = u.ctrl[wi_of(W0)], m0 = u.mask[wi_of(W0)];
  const __m512i i1 = u.idx[wi_of(W1 ? W1 : 1)], c1 = u.ctrl[wi_of(W1 ? W1 : 1)], m1 = u.mask[wi_of(W1 ? W1 : 1)];
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  for (int r = 0; r < n; ++r) {
    const uint8_t* row = rows[r];
    uint8_t* out = stage + static_cast<size_t>(r) * dp;
    for (int c = 0; c < dp / 64; ++c) {
      __m512i code = plane_chunk<W0>(row + off0 + static_cast<size_t>(c) * 8 * W0, i0, c0, m0);
      if constexpr (W1 != 0) {
        const __m512i hi = plane_chunk<W1>(row + off1 + static_cast<size_t>(c) * 8 * W1, i1, c1, m1);
        code = _mm512_or_si512(code, _mm512_slli_epi16(hi, W0));
      }
      _mm512_store_si512(out + 64 * c, _mm512_permutexvar_epi8(code, tab));
      if (stage2) _mm512_store_si512(stage2 + static_cast<size_t>(r) * dp + 64 * c, _mm512_permutexvar_epi8(code, tab2));
    }
  }
}

inline int sdp_of(int dp) { return (dp + 63) / 64 * 64; }

// Any tq layout: each part's chunks stored under a byte mask (parts need not
// align with chunks); coordinates no part covers keep 128 (centroid 0).
TKV_AVX512_INT8 void decode_any(const Unpack& u, const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows,
                                int n, int dp, uint8_t* stage) {
  __m512i tabs[RowLayout::kMaxParts][4];
  for (int p = 0; p < L.nparts; ++p)
    for (int t = 0; t < 4; ++t) tabs[p][t] = _mm512_loadu_si512(k.table[p] + 64 * t);
  for (int r = 0; r < n; ++r) {
    uint8_t* out = stage + static_cast<size_t>(r) * dp;
    std::memset(out, 128, sdp_of(dp));
    for (int p = 0; p < L.nparts; ++p) {
      const RowLayout::Part& part = L.parts[p];
      for (int cc = 0; cc * 64 < part.count; ++cc) {
        const int valid = std::min(64, part.count - cc * 64);
        const __mmask64 sm = valid >= 64 ? ~__mmask64{0} : ((__mmask64{1} << valid) - 1);
        _mm512_mask_storeu_epi8(out + part.begin + 64 * cc, sm,
                                chunk_bytes(u, part, tabs[p], part.bits, rows[r], cc, valid));
      }
    }
  }
}

// The fixed-plane signature of a layout (decode_rows' switch): one aligned
// part of at most 6 bits in planes W0 (shift 0) and W1 (shift W0), as
// 10 W0 + W1; -1 for any other layout.
int fixed_sig(const Int8Keys& k, const RowLayout& L) {
  const RowLayout::Part& p0 = L.parts[0];
  return k.aligned && L.nparts == 1 && p0.bits <= 6 && p0.nplanes <= 2 && p0.planes[0].shift == 0 &&
                 (p0.nplanes < 2 || p0.planes[1].shift == p0.planes[0].width)
             ? p0.planes[0].width * 10 + (p0.nplanes > 1 ? p0.planes[1].width : 0)
             : -1;
}

template <int V>
using Int = std::integral_constant<int, V>;

// Calls fn(W0, W1, NCH) (integral constants) for a fixed-plane layout
// (fixed_sig) over dp = 64 NCH, NCH 1, 2 or 4; false for any other.
template <class Fn>
TKV_AVX512_INT8 bool with_fixed(const Int8Keys& k, const RowLayout& L, Fn&& fn) {
  auto planes = [&](auto w0, auto w1) TKV_AVX512_INT8 {
    switch (k.dp) {
      case 64: fn(w0, w1, Int<1>{}); return true;
      case 128: fn(w0, w1, Int<2>{}); return true;
      case 256: fn(w0, w1, Int<4>{}); return true;
      default: return false;
    }
  };
  switch (fixed_sig(k, L)) {
    case 40: return planes(Int<4>{}, Int<0>{});
    case 20: return planes(Int<2>{}, Int<0>{});
    case 10: return planes(Int<1>{}, Int<0>{});
    case 21: return planes(Int<2>{}, Int<1>{});
    case 41: return planes(Int<4>{}, Int<1>{});
    case 42: return planes(Int<4>{}, Int<2>{});
    default: return false;
  }
}

// Centroid bytes (c8 + 128) of n rows into stage[r * sdp]: the fixed-plane
// kernels for one aligned part of at most 6 bits, masked stores otherwise.
TKV_AVX512_INT8 void decode_rows(const Unpack& u, const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows,
                                 int nr, int sdp, uint8_t* stage, const Int8Keys* k2 = nullptr, uint8_t* stage2 = nullptr) {
  const RowLayout::Part& p0 = L.parts[0];
  const int sig = fixed_sig(k, L);
  switch (sig) {
    case 40: decode_fixed<4, 0>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    case 20: decode_fixed<2, 0>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    case 10: decode_fixed<1, 0>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    case 21: decode_fixed<2, 1>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    case 41: decode_fixed<4, 1>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    case 42: decode_fixed<4, 2>(u, p0, k.table[0], rows, nr, sdp, stage, k2 ? k2->table[0] : nullptr, stage2); break;
    default:
      decode_any(u, k, L, rows, nr, sdp, stage);
      if (k2) decode_any(u, *k2, L, rows, nr, sdp, stage2);
      break;
  }
}

const Unpack& unpack_consts() {
  static thread_local Unpack u;
  static thread_local bool ready = false;
  if (!ready) {
    make_unpack(u);
    ready = true;
  }
  return u;
}

// Dots of nr staged rows with 4 queries; NCH chunks of 64 (0: any count,
// queries loaded per row). Queries are zero past dp (masked loads), so the
// stage's bytes there count nothing.
template <int NCH>
TKV_AVX512_INT8 void dot_rows(const uint8_t* stage, int nr, int sdp, const int8_t* const* q, int dp,
                              int32_t* const* out) {
  const int nch = NCH ? NCH : sdp / 64;
  const __mmask64 last = dp % 64 ? (__mmask64{1} << (dp % 64)) - 1 : ~__mmask64{0};
  auto qload = [&](int j, int c) TKV_AVX512_INT8 {
    return _mm512_maskz_loadu_epi8(c + 1 < nch ? ~__mmask64{0} : last, q[j] + 64 * c);
  };
  __m512i qr[4][NCH ? NCH : 1];
  if constexpr (NCH != 0)
    for (int c = 0; c < NCH; ++c)
      for (int j = 0; j < 4; ++j) qr[j][c] = qload(j, c);
  for (int r = 0; r < nr; ++r) {
    const uint8_t* b = stage + static_cast<size_t>(r) * sdp;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < nch; ++c) {
      const __m512i x = _mm512_load_si512(b + 64 * c);
      if constexpr (NCH != 0) {
        a0 = _mm512_dpbusd_epi32(a0, x, qr[0][c]);
        a1 = _mm512_dpbusd_epi32(a1, x, qr[1][c]);
        a2 = _mm512_dpbusd_epi32(a2, x, qr[2][c]);
        a3 = _mm512_dpbusd_epi32(a3, x, qr[3][c]);
      } else {
        a0 = _mm512_dpbusd_epi32(a0, x, qload(0, c));
        a1 = _mm512_dpbusd_epi32(a1, x, qload(1, c));
        a2 = _mm512_dpbusd_epi32(a2, x, qload(2, c));
        a3 = _mm512_dpbusd_epi32(a3, x, qload(3, c));
      }
    }
    alignas(16) int32_t s4[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(s4), sum4(a0, a1, a2, a3));
    for (int j = 0; j < 4; ++j)
      if (out[j]) out[j][r] = s4[j];
  }
}

// Dots of nr staged rows with G queries, 4 at a time (repeats past G
// computed and dropped).
TKV_AVX512_INT8 void dot_queries(const uint8_t* stage, int nr, int sdp, int dp, const int8_t* q8, int G,
                                 int32_t* dots, int ld, int r0) {
  const int nch = sdp / 64;
  for (int j0 = 0; j0 < G; j0 += 4) {
    const int8_t* q[4];
    for (int jj = 0; jj < 4; ++jj) q[jj] = q8 + static_cast<size_t>(std::min(j0 + jj, G - 1)) * dp;
    int32_t* out[4];
    for (int jj = 0; jj < 4; ++jj) out[jj] = jj < G - j0 ? dots + static_cast<size_t>(j0 + jj) * ld + r0 : nullptr;
    switch (nch) {
      case 1: dot_rows<1>(stage, nr, sdp, q, dp, out); break;
      case 2: dot_rows<2>(stage, nr, sdp, q, dp, out); break;
      case 4: dot_rows<4>(stage, nr, sdp, q, dp, out); break;
      default: dot_rows<0>(stage, nr, sdp, q, dp, out); break;
    }
  }
}

// The fixed-plane kernels read each 64-coordinate chunk straight into
// registers. The low plane's codes are extracted by vpmultishiftqb without
// masking: bits above the code are its neighbours', and vpermb reads the low
// 6 bits of each index, so the tables repeat with the low plane's period
// (entry x holds centroid x mod 2^W0). A 1-bit high plane is a byte mask
// (bit i = coordinate i, the packing's order): one lookup in the table of
// codes with that bit 0, a masked one in the table with it 1. A 2-bit high
// plane (6-bit codes) is masked, shifted and or-ed as before.
struct FixedTabs {
  __m512i t0, t1;
};

template <int W0, int W1>
TKV_AVX512_INT8 inline FixedTabs fixed_tabs(const uint8_t* table) {
  const __m512i raw = _mm512_loadu_si512(table);  // entries 0..63 (codes of at most 6 bits)
  if constexpr (W1 == 2) return {raw, raw};
  alignas(64) static constexpr uint8_t kIota[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                                    32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                                    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i lo = _mm512_and_si512(_mm512_load_si512(kIota), _mm512_set1_epi8((1 << W0) - 1));
  const __m512i t0 = _mm512_permutexvar_epi8(lo, raw);
  if constexpr (W1 == 0) return {t0, t0};
  const __m512i t1 = _mm512_permutexvar_epi8(_mm512_or_si512(lo, _mm512_set1_epi8(1 << W0)), raw);
  return {t0, t1};
}

// Centroid bytes of chunk c of a row (table t; t2 too when TWO).
template <int W0, int W1, bool TWO>
TKV_AVX512_INT8 inline void fixed_chunk(const Unpack& u, const uint8_t* row, size_t off0, size_t off1, int c,
                                        const FixedTabs& t, const FixedTabs& t2, __m512i& x, __m512i& x2) {
  const uint8_t* src = row + off0 + static_cast<size_t>(c) * 8 * W0;
  __m512i v;
  if constexpr (W0 == 4) v = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
  if constexpr (W0 == 2) v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  if constexpr (W0 == 1) v = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
  __m512i code = _mm512_multishift_epi64_epi8(u.ctrl[wi_of(W0)], _mm512_permutexvar_epi64(u.idx[wi_of(W0)], v));
  if constexpr (W1 == 2) {
    const __m512i hi = plane_chunk<2>(row + off1 + static_cast<size_t>(c) * 16, u.idx[1], u.ctrl[1], u.mask[1]);
    code = _mm512_or_si512(_mm512_and_si512(code, u.mask[wi_of(W0)]), _mm512_slli_epi16(hi, W0));
  }
  if constexpr (W1 == 1) {
    uint64_t bits;
    std::memcpy(&bits, row + off1 + static_cast<size_t>(c) * 8, 8);
    const __mmask64 m = _cvtu64_mask64(bits);
    x = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(code, t.t0), m, code, t.t1);
    if constexpr (TWO) x2 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(code, t2.t0), m, code, t2.t1);
  } else {
    x = _mm512_permutexvar_epi8(code, t.t0);
    if constexpr (TWO) x2 = _mm512_permutexvar_epi8(code, t2.t0);
  }
}

// vpermd's control for a 4 x 4 transpose of dwords: dword 4i + j <- dword
// 4j + i (lane-major sums to query-major, interleaved bytes to row order).
TKV_AVX512_INT8 inline __m512i transpose4x4_dwords() {
  return _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
}

// The 16 lane sums of a[0..15] in one vector, lane i = Σ a[i] (three
// levels of pairwise transpose-and-add: 45 operations for 16 sums, where
// four-at-a-time reductions and scalar stores took ~19 a row).
TKV_AVX512_INT8 inline __m512i sum16(const __m512i* a) {
  __m512i t[8], v[4];
  for (int k = 0; k < 8; ++k)
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]));
  for (int k = 0; k < 4; ++k)
    v[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]), _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  // v[k]'s 128-bit lane l: partial sums of a[4k .. 4k+3] (over lane l's 4 lanes).
  const __m512i w0 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], 0x88), _mm512_shuffle_i32x4(v[0], v[1], 0xDD));
  const __m512i w1 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2], v[3], 0x88), _mm512_shuffle_i32x4(v[2], v[3], 0xDD));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w0, w1, 0x88), _mm512_shuffle_i32x4(w0, w1, 0xDD));
}

// Dots of 4 rows' chunks (x[r][c]) with G queries, 4 queries at a time:
// dots[j * ld + r] for r < nr (<= 4) and j < G.
template <int NCH>
TKV_AVX512_INT8 inline void rows4_dots(const __m512i (*x)[NCH], int nr, const int8_t* q8, int dp, int G,
                                       int32_t* dots, int ld) {
  // Lane 4 r + j of sum16's result -> lane 4 j + r.
  const __m512i qmajor = transpose4x4_dwords();
  const __mmask16 rows_mask = static_cast<__mmask16>((1u << nr) - 1);
  for (int j0 = 0; j0 < G; j0 += 4) {
    const int8_t* q[4];
    for (int jj = 0; jj < 4; ++jj) q[jj] = q8 + static_cast<size_t>(std::min(j0 + jj, G - 1)) * dp;
    __m512i a[16];
    for (int r = 0; r < 4; ++r)
      for (int jj = 0; jj < 4; ++jj) {
        __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), x[r][0], _mm512_loadu_si512(q[jj]));
        for (int c = 1; c < NCH; ++c) acc = _mm512_dpbusd_epi32(acc, x[r][c], _mm512_loadu_si512(q[jj] + 64 * c));
        a[4 * r + jj] = acc;
      }
    const __m512i s = _mm512_permutexvar_epi32(qmajor, sum16(a));
    int32_t* o = dots + static_cast<size_t>(j0) * ld;
    _mm_mask_storeu_epi32(o, rows_mask, _mm512_castsi512_si128(s));
    if (j0 + 1 < G) _mm_mask_storeu_epi32(o + ld, rows_mask, _mm512_extracti32x4_epi32(s, 1));
    if (j0 + 2 < G) _mm_mask_storeu_epi32(o + 2 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 2));
    if (j0 + 3 < G) _mm_mask_storeu_epi32(o + 3 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 3));
  }
}

// int8_dots2 for the fixed-plane layouts, dp = 64 NCH: rows four at a time,
// their chunks looked up and dotted in registers (no staging through memory).
template <int W0, int W1, int NCH, bool TWO>
TKV_AVX512_INT8 void dots_fixed(const Unpack& u, const RowLayout::Part& part, const uint8_t* table,
                                const uint8_t* table2, const uint8_t* const* rows, int n, const int8_t* q8, int G,
                                int32_t* dots, int G2, int32_t* dots2, int ld) {
  const int dp = 64 * NCH;
  const FixedTabs t = fixed_tabs<W0, W1>(table);
  const FixedTabs t2 = TWO ? fixed_tabs<W0, W1>(table2) : t;
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  for (int r0 = 0; r0 < n; r0 += 4) {
    const int nr = std::min(4, n - r0);
    __m512i x[4][NCH], x2[4][NCH];
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < NCH; ++c)  // rows past n repeat the last (their sums are not stored)
        fixed_chunk<W0, W1, TWO>(u, rows[r0 + std::min(r, nr - 1)], off0, off1, c, t, t2, x[r][c], x2[r][c]);
    rows4_dots<NCH>(x, nr, q8, dp, G, dots + r0, ld);
    if constexpr (TWO) rows4_dots<NCH>(x2, nr, q8, dp, G2, dots2 + r0, ld);
  }
}

// int8_dots16 for one 4-bit part over dp = 64 NCH. Per 64 coordinates the
// 32 code bytes are widened to words (vpmovzxbw): a word's low nibble is an
// even coordinate's code, its next 4 bits the odd one's; vpermw reads 5 index
// bits, so the 16 centroid words are repeated twice in its table and the odd
// codes are the words shifted right by 4. The query is rearranged to the
// same order (even coordinates, then odd) once per call.
template <int NCH>
TKV_AVX512_INT8 void dots16_fixed(const RowLayout::Part& part, const int16_t* table16, const uint8_t* const* rows,
                                  int n, const int16_t* q16, int G, int32_t* dots, int ld) {
  const int dp = 64 * NCH;
  alignas(64) int16_t tw[32];
  for (int x = 0; x < 32; ++x) tw[x] = table16[x & 15];
  const __m512i tab = _mm512_load_si512(tw);
  alignas(64) int16_t even_idx[32], odd_idx[32];
  for (int i = 0; i < 32; ++i) {
    even_idx[i] = static_cast<int16_t>(2 * i);
    odd_idx[i] = static_cast<int16_t>(2 * i + 1);
  }
  const __m512i ie = _mm512_load_si512(even_idx), io = _mm512_load_si512(odd_idx);
  const __m512i qmajor = transpose4x4_dwords();
  const size_t off = part.planes[0].offset;
  for (int j0 = 0; j0 < G; j0 += 4) {
    __m512i qe[4][NCH], qo[4][NCH];
    for (int jj = 0; jj < 4; ++jj) {
      const int16_t* q = q16 + static_cast<size_t>(std::min(j0 + jj, G - 1)) * dp;
      for (int c = 0; c < NCH; ++c) {
        const __m512i lo = _mm512_loadu_si512(q + 64 * c), hi = _mm512_loadu_si512(q + 64 * c + 32);
        qe[jj][c] = _mm512_permutex2var_epi16(lo, ie, hi);
        qo[jj][c] = _mm512_permutex2var_epi16(lo, io, hi);
      }
    }
    for (int r0 = 0; r0 < n; r0 += 4) {
      const int nr = std::min(4, n - r0);
      __m512i a[16];
      for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_si512();
      for (int r = 0; r < 4; ++r) {
        const uint8_t* row = rows[r0 + std::min(r, nr - 1)] + off;
        for (int c = 0; c < NCH; ++c) {
          const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * c)));
          const __m512i we = _mm512_permutexvar_epi16(v, tab);
          const __m512i wo = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), tab);
          for (int jj = 0; jj < 4; ++jj)
            a[4 * r + jj] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(a[4 * r + jj], we, qe[jj][c]), wo, qo[jj][c]);
        }
      }
      const __m512i s = _mm512_permutexvar_epi32(qmajor, sum16(a));
      const __mmask16 rows_mask = static_cast<__mmask16>((1u << nr) - 1);
      int32_t* o = dots + static_cast<size_t>(j0) * ld + r0;
      _mm_mask_storeu_epi32(o, rows_mask, _mm512_castsi512_si128(s));
      if (j0 + 1 < G) _mm_mask_storeu_epi32(o + ld, rows_mask, _mm512_extracti32x4_epi32(s, 1));
      if (j0 + 2 < G) _mm_mask_storeu_epi32(o + 2 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 2));
      if (j0 + 3 < G) _mm_mask_storeu_epi32(o + 3 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 3));
    }
  }
}

TKV_AVX512_INT8 bool dots_fused(const Unpack& u, const Int8Keys& k, const Int8Keys* k2, const RowLayout& L,
                                const uint8_t* const* rows, int n, const int8_t* q8, int G, int32_t* dots, int G2,
                                int32_t* dots2, int ld) {
  const RowLayout::Part& p = L.parts[0];
  return with_fixed(k, L, [&](auto w0, auto w1, auto nch) TKV_AVX512_INT8 {
    if (k2) {
      dots_fixed<w0, w1, nch, true>(u, p, k.table[0], k2->table[0], rows, n, q8, G, dots, G2, dots2, ld);
    } else {
      dots_fixed<w0, w1, nch, false>(u, p, k.table[0], k.table[0], rows, n, q8, G, dots, 0, nullptr, ld);
    }
  });
}

TKV_AVX512_INT8 void dots2_avx512(const Int8Keys& k, const Int8Keys* k2, const RowLayout& L, const uint8_t* const* rows,
                                  int n, const int8_t* q8, int G, int32_t* dots, int G2, int32_t* dots2, int ld) {
  const Unpack& u = unpack_consts();
  if (dots_fused(u, k, k2, L, rows, n, q8, G, dots, G2, dots2, ld)) return;
  const int dp = k.dp;
  const int sdp = (dp + 63) / 64 * 64;  // stage row stride: whole chunks (bytes past dp meet zero queries)
  alignas(64) uint8_t stage[32 * 1024];
  alignas(64) static thread_local uint8_t stage2[32 * 1024];
  for (int r0 = 0; r0 < n; r0 += 32) {
    const int nr = std::min(32, n - r0);
    // 1. Centroid bytes of up to 32 rows (32 KiB at d 1024: L1).
    decode_rows(u, k, L, rows + r0, nr, sdp, stage, k2, k2 ? stage2 : nullptr);
    // 2. Dots.
    dot_queries(stage, nr, sdp, dp, q8, G, dots, ld, r0);
    if (k2) dot_queries(stage2, nr, sdp, dp, q8, G2, dots2, ld, r0);
  }
}


// The weight bytes of queries j0 .. j0+3 (of G) over n <= 16 NV rows (NV 4,
// or 8 for tq2's 128-row blocks), as 4 rows
// a dword (w4[jj][g]: rows 4g .. 4g+3, 0 past n and past G), and their
// scales times cs in f; false when every one is 0 (every AVX-512 V kernel's
// weight bytes). int8_weights for the 4
// queries side by side: their maxima reduced, then one division for the 4
// (a query at a time, each waited on its reduction and division: most of
// a V call's ~230 cycles besides its rows).
template <int NV = 4>
TKV_AVX512_INT8 inline bool weights4(const float* w, int n, int G, int j0, int ldw, float cs, float* f,
                                     int32_t (*w4)[4 * NV]) {
  __mmask16 mk[NV];
  for (int i = 0; i < NV; ++i) {
    const int c = std::clamp(n - 16 * i, 0, 16);
    mk[i] = c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << c) - 1);
  }
  __m512 v[4][NV], mx[4];
  for (int jj = 0; jj < 4; ++jj) {
    const bool live = j0 + jj < G;
    const float* wj = live ? w + static_cast<size_t>(j0 + jj) * ldw : w;
    mx[jj] = _mm512_setzero_ps();
    for (int i = 0; i < NV; ++i) {
      v[jj][i] = _mm512_maskz_loadu_ps(live ? mk[i] : 0, wj + 16 * i);
      mx[jj] = _mm512_max_ps(mx[jj], v[jj][i]);
    }
  }
  // The 4 maxima reduced side by side (weights are >= 0: the zeros change
  // nothing): lane jj of mv = max over mx[jj]'s 16 lanes.
  const __m512 u01 = _mm512_max_ps(_mm512_unpacklo_ps(mx[0], mx[1]), _mm512_unpackhi_ps(mx[0], mx[1]));
  const __m512 u23 = _mm512_max_ps(_mm512_unpacklo_ps(mx[2], mx[3]), _mm512_unpackhi_ps(mx[2], mx[3]));
  const __m512 u = _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u01), _mm512_castps_pd(u23))));
  // u: lane 4l + jj = max over lane l's 4 of mx[jj] (l: 128-bit lane)
  const __m256 u8 = _mm256_max_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
  const __m128 mv = _mm_max_ps(_mm256_castps256_ps128(u8), _mm256_extractf128_ps(u8, 1));
  const __mmask8 pos = _mm_cmp_ps_mask(mv, _mm_setzero_ps(), _CMP_GT_OQ);  // (not NaN, not 0)
  // and 255 / max finite (int8_weights: below, bytes 0 and scale 0, so that
  // the query is skipped as there, and an accumulator at -0 stays -0)
  const __m128 inv4 = _mm_maskz_div_ps(pos, _mm_set1_ps(255.0f), mv);
  const __mmask8 live = pos & _mm_cmp_ps_mask(inv4, _mm_set1_ps(std::numeric_limits<float>::max()), _CMP_LE_OQ);
  if (!live) return false;
  alignas(16) float inv[4], ws[4];
  _mm_store_ps(inv, _mm_maskz_mov_ps(live, inv4));  // 0 where the max is not > 0 or too small
  _mm_store_ps(ws, _mm_maskz_div_ps(live, mv, _mm_set1_ps(255.0f)));
  const __m512 half = _mm512_set1_ps(0.5f);
  // Bytes by unsigned saturating packs (past n and past G the weights are 0:
  // bytes 0; at most 255.5 truncated: 255), 64 at a time, put in row order
  // by one vpermd (the packs interleave the 4 vectors' 128-bit lanes).
  const __m512i order = transpose4x4_dwords();
  for (int jj = 0; jj < 4; ++jj) {
    f[jj] = ws[jj] * cs;
    const __m512 iv = _mm512_set1_ps(inv[jj]);
    for (int i = 0; i < NV; i += 4) {
      __m512i ia[4];
      for (int t = 0; t < 4; ++t) ia[t] = _mm512_cvttps_epi32(_mm512_fmadd_ps(v[jj][i + t], iv, half));
      const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(ia[0], ia[1]), _mm512_packus_epi32(ia[2], ia[3]));
      _mm512_storeu_si512(w4[jj] + 4 * i, _mm512_permutexvar_epi32(order, b));
    }
  }
  return true;
}

// Back to natural order and into the f32 accumulators: block b of the 4
// sums a0..a3 holds coordinates 16b .. 16b+15 of the chunk in the order
// m = 0..3 (the interleaving below); out += f · sums.
TKV_AVX512_INT8 inline void values_store(__m512i a0, __m512i a1, __m512i a2, __m512i a3, float f, float* out,
                                         int valid) {
  const __m512i t0 = _mm512_shuffle_i32x4(a0, a1, 0x44), t1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
  const __m512i t2 = _mm512_shuffle_i32x4(a0, a1, 0xEE), t3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
  const __m512i nat[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                          _mm512_shuffle_i32x4(t2, t3, 0x88), _mm512_shuffle_i32x4(t2, t3, 0xDD)};
  const __m512 fv = _mm512_set1_ps(f);
  for (int b = 0; b < 4 && 16 * b < valid; ++b)
    _mm512_storeu_ps(out + 16 * b, _mm512_fmadd_ps(_mm512_cvtepi32_ps(nat[b]), fv, _mm512_loadu_ps(out + 16 * b)));
}

// int8_values for the fixed-plane layouts, dp = 64 NCH: per chunk, rows four
// at a time looked up in registers (signed centroid bytes), interleaved so
// that vpdpbusd sums over the 4 rows, and accumulated for 4 queries at once
// (no staging of the rows' bytes through memory).
template <int W0, int W1, int NCH>
TKV_AVX512_INT8 void values_fixed(const Unpack& u, const RowLayout::Part& part, const uint8_t* table, float cs,
                                  const uint8_t* const* rows, int n, const float* w, int G, int ldw, float* acc) {
  const int dp = 64 * NCH;
  FixedTabs t = fixed_tabs<W0, W1>(table);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  t.t0 = _mm512_xor_si512(t.t0, flip);  // c8 + 128 -> c8
  t.t1 = _mm512_xor_si512(t.t1, flip);
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  const int ng = (n + 3) / 4;
  for (int j0 = 0; j0 < G; j0 += 4) {
    float f[4];
    int32_t w4[4][16];
    if (!weights4(w, n, G, j0, ldw, cs, f, w4)) continue;
    for (int c = 0; c < NCH; ++c) {
      __m512i s[4][4];
      for (int jj = 0; jj < 4; ++jj)
        for (int m = 0; m < 4; ++m) s[jj][m] = _mm512_setzero_si512();
      for (int g = 0; g < ng; ++g) {
        __m512i y[4], unused;
        for (int i = 0; i < 4; ++i)  // rows past n: the last row again, with weight 0
          fixed_chunk<W0, W1, false>(u, rows[std::min(4 * g + i, n - 1)], off0, off1, c, t, t, y[i], unused);
        const __m512i lo01 = _mm512_unpacklo_epi8(y[0], y[1]), hi01 = _mm512_unpackhi_epi8(y[0], y[1]);
        const __m512i lo23 = _mm512_unpacklo_epi8(y[2], y[3]), hi23 = _mm512_unpackhi_epi8(y[2], y[3]);
        const __m512i x[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                              _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
        for (int jj = 0; jj < 4; ++jj) {
          const __m512i b = _mm512_set1_epi32(w4[jj][g]);
          for (int m = 0; m < 4; ++m) s[jj][m] = _mm512_dpbusd_epi32(s[jj][m], b, x[m]);
        }
      }
      for (int jj = 0; jj < 4; ++jj)
        if (j0 + jj < G && f[jj] != 0.0f)
          values_store(s[jj][0], s[jj][1], s[jj][2], s[jj][3], f[jj], acc + static_cast<size_t>(j0 + jj) * dp + 64 * c,
                       64);
    }
  }
}

TKV_AVX512_INT8 bool values_fused(const Unpack& u, const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows,
                                  int n, const float* w, int G, int ldw, float* acc) {
  if (n <= 0 || n > 32) return false;
  return with_fixed(k, L, [&](auto w0, auto w1, auto nch) TKV_AVX512_INT8 {
    values_fixed<w0, w1, nch>(u, L.parts[0], k.table[0], k.cs, rows, n, w, G, ldw, acc);
  });
}

TKV_AVX512_INT8 void values_avx512(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                   const float* w, int G, int ldw, float* acc) {
  const Unpack& u = unpack_consts();
  if (values_fused(u, k, L, rows, n, w, G, ldw, acc)) return;
  const int dp = k.dp, nch = (dp + 63) / 64, sdp = nch * 64;
  alignas(64) uint8_t stage[32 * 1024];
  // Row groups of 4, chunks of 64: 4 vectors whose lane l holds the 4 rows'
  // signed centroid bytes of coordinate 16 (l / 4) + 4 m + l % 4 (vpdpbusd
  // sums 4 adjacent bytes: the 4 rows).
  alignas(64) static thread_local __m512i tr[8][16][4];
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int r0 = 0; r0 < n; r0 += 32) {
    const int nr = std::min(32, n - r0), ng = (nr + 3) / 4;
    decode_rows(u, k, L, rows + r0, nr, sdp, stage);
    for (int r = nr; r < ng * 4; ++r) std::memset(stage + static_cast<size_t>(r) * sdp, 128, sdp);
    for (int g = 0; g < ng; ++g)
      for (int c = 0; c < nch; ++c) {
        const uint8_t* b = stage + static_cast<size_t>(4 * g) * sdp + 64 * c;
        const __m512i a0 = _mm512_xor_si512(_mm512_load_si512(b), flip);
        const __m512i a1 = _mm512_xor_si512(_mm512_load_si512(b + sdp), flip);
        const __m512i a2 = _mm512_xor_si512(_mm512_load_si512(b + 2 * sdp), flip);
        const __m512i a3 = _mm512_xor_si512(_mm512_load_si512(b + 3 * sdp), flip);
        const __m512i lo01 = _mm512_unpacklo_epi8(a0, a1), hi01 = _mm512_unpackhi_epi8(a0, a1);
        const __m512i lo23 = _mm512_unpacklo_epi8(a2, a3), hi23 = _mm512_unpackhi_epi8(a2, a3);
        tr[g][c][0] = _mm512_unpacklo_epi16(lo01, lo23);
        tr[g][c][1] = _mm512_unpackhi_epi16(lo01, lo23);
        tr[g][c][2] = _mm512_unpacklo_epi16(hi01, hi23);
        tr[g][c][3] = _mm512_unpackhi_epi16(hi01, hi23);
      }
    float f[4];
    int32_t w4[4][16];
    for (int j0 = 0; j0 < G; j0 += 4) {
      if (!weights4(w + r0, nr, G, j0, ldw, k.cs, f, w4)) continue;
      for (int c = 0; c < nch; ++c) {
        __m512i s00 = _mm512_setzero_si512(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00,
                s13 = s00, s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
        for (int g = 0; g < ng; ++g) {
          const __m512i x0 = tr[g][c][0], x1 = tr[g][c][1], x2 = tr[g][c][2], x3 = tr[g][c][3];
          const __m512i b0 = _mm512_set1_epi32(w4[0][g]), b1 = _mm512_set1_epi32(w4[1][g]);
          const __m512i b2 = _mm512_set1_epi32(w4[2][g]), b3 = _mm512_set1_epi32(w4[3][g]);
          s00 = _mm512_dpbusd_epi32(s00, b0, x0); s01 = _mm512_dpbusd_epi32(s01, b0, x1);
          s02 = _mm512_dpbusd_epi32(s02, b0, x2); s03 = _mm512_dpbusd_epi32(s03, b0, x3);
          s10 = _mm512_dpbusd_epi32(s10, b1, x0); s11 = _mm512_dpbusd_epi32(s11, b1, x1);
          s12 = _mm512_dpbusd_epi32(s12, b1, x2); s13 = _mm512_dpbusd_epi32(s13, b1, x3);
          s20 = _mm512_dpbusd_epi32(s20, b2, x0); s21 = _mm512_dpbusd_epi32(s21, b2, x1);
          s22 = _mm512_dpbusd_epi32(s22, b2, x2); s23 = _mm512_dpbusd_epi32(s23, b2, x3);
          s30 = _mm512_dpbusd_epi32(s30, b3, x0); s31 = _mm512_dpbusd_epi32(s31, b3, x1);
          s32 = _mm512_dpbusd_epi32(s32, b3, x2); s33 = _mm512_dpbusd_epi32(s33, b3, x3);
        }
        // Back to natural order: block b of the 4 sums holds coordinates
        // 16b .. 16b+15 of the chunk in the order m = 0..3.
        auto store = [&](int jj, __m512i a0, __m512i a1, __m512i a2, __m512i a3) TKV_AVX512_INT8 {
          if (j0 + jj >= G || f[jj] == 0.0f) return;
          const __m512i t0 = _mm512_shuffle_i32x4(a0, a1, 0x44), t1 = _mm512_shuffle_i32x4(a2, a3, 0x44);
          const __m512i t2 = _mm512_shuffle_i32x4(a0, a1, 0xEE), t3 = _mm512_shuffle_i32x4(a2, a3, 0xEE);
          const __m512i nat[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                                  _mm512_shuffle_i32x4(t2, t3, 0x88), _mm512_shuffle_i32x4(t2, t3, 0xDD)};
          const __m512 fv = _mm512_set1_ps(f[jj]);
          float* out = acc + static_cast<size_t>(j0 + jj) * dp + 64 * c;
          for (int b = 0; b < 4 && 64 * c + 16 * b < dp; ++b)
            _mm512_storeu_ps(out + 16 * b, _mm512_add_ps(_mm512_loadu_ps(out + 16 * b),
                                                         _mm512_mul_ps(_mm512_cvtepi32_ps(nat[b]), fv)));
        };
        store(0, s00, s01, s02, s03);
        store(1, s10, s11, s12, s13);
        store(2, s20, s21, s22, s23);
        store(3, s30, s31, s32, s33);
      }
    }
  }
}

void dots16_avx512(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int16_t* q16, int G,
                   int32_t* dots, int ld) {
  switch (k.dp) {
    case 64: return dots16_fixed<1>(L.parts[0], k.table16, rows, n, q16, G, dots, ld);
    case 128: return dots16_fixed<2>(L.parts[0], k.table16, rows, n, q16, G, dots, ld);
    case 256: return dots16_fixed<4>(L.parts[0], k.table16, rows, n, q16, G, dots, ld);
    default: int8_dots16_ref(k, L, rows, n, q16, G, dots, ld);
  }
}


// --- Lane kernels ---------------------------------------------------------
// Intel's cores run 512-bit shuffles on one port and vpdpbusd / vpdpwssd on
// two (measured on this session's Xeon, independent chains at ~2 GHz:
// vpermb, vpermw, unpacks 0.45-0.47 ns, vpmultishiftqb 0.56, vpdpbusd and
// vpdpwssd 0.30, vpaddd 0.27). The row kernels above spend ~14 shuffles a
// row on keys (extracting a row's codes, and reducing its 16 lanes of sums
// per query: sum16) and ~10 on values (extracting, and interleaving 4 rows'
// centroid bytes for vpdpbusd). Here four rows' code bytes sit side by side
// in the 128-bit lanes of one vector, put there by masked broadcast loads
// (a load and a blend, no shuffle), and a code's bits are reached by a
// 16-bit shift (vpermb reads 6 index bits; the tables repeat with the code's
// period) instead of an extraction. Keys: per 4 rows and 16 coordinates one
// shift, one lookup and one vpdpbusd per query; a row's sum is the 4 lanes
// of its 128-bit lane (1.5 shuffles a row and query group). Values: the 4
// rows' raw code bytes interleaved once (one vpermb), then shift, lookup
// and vpdpbusd per 16 coordinates, accumulated in the kernel order (no
// shuffle back). Queries and accumulators are in int8_query_order /
// int8_values_order. Measured alone in L1 (RESULTS §33): tq2 keys 6-21 %
// and values 11-20 % faster than the row kernels, tq3 0-19 %; the dots
// (8 a row for keys, 8 for values, G = 4) are now most of the work. 4-bit
// codes in lanes (keys on words, values on bytes) ran 7-12 % slower; tq4
// now takes the transposed keys and values_nib4 below (RESULTS §45), and
// so do tq2 and tq3's keys at dp 128 and 256 (dots_t16). The lookups of
// 2-bit codes go through lookups4 (two tables, one index byte for two
// codes): keys at dp 64 alone in L1, tq3 17.9 -> 15.8 cycles a row, tq2
// 14.0 -> 13.6 (RESULTS §52).

// Calls fn(nq) with a group's query count (1-4) as a constant (the V
// kernels: a last group of 1-3 queries, and G = 1 or 2, paid for 4).
template <class Fn>
TKV_AVX512_INT8 void with_count512(int nq, Fn&& fn) {
  switch (nq) {
    case 4: return fn(Int<4>{});
    case 3: return fn(Int<3>{});
    case 2: return fn(Int<2>{});
    default: return fn(Int<1>{});
  }
}

// 16 bytes at a, then 16 at b.
TKV_AVX512_INT8 inline __m256i two16(const uint8_t* a, const uint8_t* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// Row l's 16 bytes at off in 128-bit lane l (rp: 4 row pointers).
TKV_AVX512_INT8 inline __m512i lanes4(const uint8_t* const* rp, size_t off) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(two16(rp[0] + off, rp[1] + off)), two16(rp[2] + off, rp[3] + off),
                            1);
}

// 32 bytes at a, then 32 at b.
TKV_AVX512_INT8 inline __m512i two_rows(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}

// Row l's 8 bytes at off in the qwords selected by mask << (bits per row):
// per_row 2 (both qwords of lane l) or 1 (qword l; qwords 4..7 hold row 0's).
template <int PER_ROW>
TKV_AVX512_INT8 inline __m512i qwords4(const uint8_t* const* rp, size_t off) {
  constexpr __mmask8 m = PER_ROW == 2 ? 0x03 : 0x01;
  __m512i h = _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(rp[0] + off)));
  h = _mm512_mask_broadcastq_epi64(h, m << PER_ROW, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rp[1] + off)));
  h = _mm512_mask_broadcastq_epi64(h, m << (2 * PER_ROW), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rp[2] + off)));
  return _mm512_mask_broadcastq_epi64(h, m << (3 * PER_ROW), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rp[3] + off)));
}

// The ordered kernels' constant vectors (built once: per call they were ~14
// scalar operations a row).
struct LaneConsts {
  alignas(64) uint8_t kctrl[64];  // keys at dp 64: lane byte b <- bits 4b .. 4b+3 at bits 4-7 (lookups4; both
                                  // qwords hold the row's 64 bits)
  alignas(64) uint8_t ileave[64];    // dword i byte m <- lane m byte i
  alignas(64) uint8_t hileave[64];   // qword Q byte p <- qword p % 4's byte Q
  alignas(64) uint8_t vnib[64];      // values: byte 4i + m <- row m's bits 4i .. 4i+3 at bits 4-7 (bits 8m + 4 (i % 2) ..
                                     // of qword i / 2)
  // dots_t16, tq3's high plane: byte 4(r % 2) + e of a qword <- the 8 bits
  // from bit 32(r % 2) + 16m + 4e, i.e. in row r's dword of H the nibble of
  // coordinates 16k + 4e .. +3 (k = 2k' + m): their high bits at bits 4-7
  // (lookups4; the window starts 4 bits early, wrapping within the qword).
  alignas(64) uint8_t hctl[2][64];
  // values_nib4, half h: byte 4i + m <- row m's byte 16h + i (rows 0, 1 in a; 2, 3 in b).
  alignas(64) uint8_t il[2][64];
  // values_lanes2 at dp 128 / 256 (x = 0 / 1), tq3's high plane: qword Q
  // byte p <- row p % 4's byte Q, the rows' 8 (2 << x) bytes side by side
  // in two vectors (rows 0, 1 in a; 2, 3 in b; hileave's order; + 8u for
  // chunk u).
  alignas(64) uint8_t hil2[2][4][64];
  LaneConsts() {
    for (int e = 0; e < 64; ++e) {
      kctrl[e] = static_cast<uint8_t>((4 * (e % 16) - 4) & 63);  // (the rotation wraps within the qword)
      ileave[e] = static_cast<uint8_t>(16 * (e % 4) + e / 4);
      hileave[e] = static_cast<uint8_t>(8 * (e % 8 % 4) + e / 8);
      vnib[e] = static_cast<uint8_t>((8 * (e % 4) + 4 * (e / 4 % 2) - 4) & 63);
      for (int m = 0; m < 2; ++m) hctl[m][e] = static_cast<uint8_t>((32 * (e % 8 / 4) + 16 * m + 4 * (e % 4) - 4) & 63);
      for (int h = 0; h < 2; ++h) il[h][e] = static_cast<uint8_t>(64 * (e % 4 / 2) + 32 * (e % 2) + 16 * h + e / 4);
      for (int x = 0; x < 2; ++x)
        for (int u = 0; u < 4; ++u)
          hil2[x][u][e] = static_cast<uint8_t>(64 * (e % 4 / 2) + (16 << x) * (e % 2) + 8 * u + e / 8);
    }
  }
};
const LaneConsts& lane_consts() {
  static const LaneConsts c;
  return c;
}

// vpternlogd: bits where c is set from a, the others from b.
constexpr int kSelectAC = 0xE4;

// The two tables of lookups4 (Int8Keys::lanes_t2 or lanes_vt2: 128 bytes
// at t). Loaded per call as they are: built here from the period-8 table
// (two vpermb on the constants), they cost tq4's keys, which take neither,
// 10 % alone in L1 (13.5 -> 14.8 cycles a row at 64 rows a call).
struct Tables2 {
  __m512i t0, t1;
};
TKV_AVX512_INT8 inline Tables2 tables2(const uint8_t* t) {
  return {_mm512_loadu_si512(t), _mm512_loadu_si512(t + 64)};
}

// The centroid bytes x[s] of code positions s = 0..3 of a vector z of
// 2-bit code bytes (position s in bits 2s, 2s+1), with tq3's high bits
// (W1 = 1) from e: bits 4-7 of each byte the high bits of positions 0-3
// (one vpmultishiftqb window). vpermb reads index bits 0-5, so two tables
// read two codes of one index byte: t0 the code in bits 0-1 with its high
// bit in bit 4, t1 the code in bits 2-3 with bit 5. Positions 0 and 1 are
// looked up in z's low nibbles with e's bits 4-5 (one vpternlogd), 2 and 3
// in z >> 4 with e >> 2's. Against a shift and a merge a position (each
// code to bits 0-1, its high bit to bit 2, one period-8 table): 2 shifts
// and 2 merges of 4 where there were 6 and 4; on Zen 4 the merges, the
// lookups and vpdpbusd share their pipes, the shifts hardly (RESULTS §52).
template <int W1>
TKV_AVX512_INT8 __attribute__((always_inline)) inline void lookups4(__m512i z, __m512i e, const Tables2& t,
                                                                     __m512i* x) {
  const __m512i z4 = _mm512_srli_epi16(z, 4);  // (within each byte: bits 4-7 -> 0-3)
  __m512i i01 = z, i23 = z4;
  if constexpr (W1 == 1) {
    const __m512i low4 = _mm512_set1_epi8(15);
    i01 = _mm512_ternarylogic_epi32(z, e, low4, kSelectAC);
    i23 = _mm512_ternarylogic_epi32(z4, _mm512_srli_epi16(e, 2), low4, kSelectAC);  // (e: bits 6, 7 -> 4, 5)
  }
  x[0] = _mm512_permutexvar_epi8(i01, t.t0);
  x[1] = _mm512_permutexvar_epi8(i01, t.t1);
  x[2] = _mm512_permutexvar_epi8(i23, t.t0);
  x[3] = _mm512_permutexvar_epi8(i23, t.t1);
}

// Lane l dword j = Σ of the 4 dwords of a[j]'s lane l (rows in lanes, 4 queries).
TKV_AVX512_INT8 inline void lanes_store(const __m512i* a, int nr, int j0, int G, int32_t* dots, int ld, int r0) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  // u: lane l dword j = dot(row r0 + l, query j0 + j) -> lane j dword l.
  const __m512i qmajor = transpose4x4_dwords();
  const __m512i s = _mm512_permutexvar_epi32(qmajor, u);
  const __mmask16 rows_mask = static_cast<__mmask16>((1u << nr) - 1);
  int32_t* o = dots + static_cast<size_t>(j0) * ld + r0;
  _mm_mask_storeu_epi32(o, rows_mask, _mm512_castsi512_si128(s));
  if (j0 + 1 < G) _mm_mask_storeu_epi32(o + ld, rows_mask, _mm512_extracti32x4_epi32(s, 1));
  if (j0 + 2 < G) _mm_mask_storeu_epi32(o + 2 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 2));
  if (j0 + 3 < G) _mm_mask_storeu_epi32(o + 3 * ld, rows_mask, _mm512_extracti32x4_epi32(s, 3));
}

// Keys, one part of 2-bit codes (+ a 1-bit high plane when W1 = 1) over
// dp = 64 NCH; q8 in int8_query_order. Per 64-coordinate chunk c: z holds
// the 4 rows' 16 low-plane bytes; (z >> 2s)'s byte b indexes code 4b + s.
template <int W1, int NCH>
TKV_AVX512_INT8 void dots_lanes2(const RowLayout::Part& part, const uint8_t* table, const uint8_t* const* rows, int n,
                                 const int8_t* q8, int G, int32_t* dots, int ld) {
  const int dp = 64 * NCH;
  const Tables2 tab = tables2(table);  // Int8Keys::lanes_t2
  __m512i hctrl = _mm512_setzero_si512();
  if constexpr (W1 == 1) hctrl = _mm512_load_si512(lane_consts().kctrl);
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  for (int j0 = 0; j0 < G; j0 += 4) {
    const int8_t* q[4];
    for (int jj = 0; jj < 4; ++jj) q[jj] = q8 + static_cast<size_t>(std::min(j0 + jj, G - 1)) * dp;
    for (int r0 = 0; r0 < n; r0 += 4) {
      const int nr = std::min(4, n - r0);
      const uint8_t* rp[4];
      for (int i = 0; i < 4; ++i) rp[i] = rows[r0 + std::min(i, nr - 1)];  // past n: the last row again, not stored
      __m512i a[4][2];
      for (int jj = 0; jj < 4; ++jj) a[jj][0] = a[jj][1] = _mm512_setzero_si512();
      for (int c = 0; c < NCH; ++c) {
        const __m512i z = lanes4(rp, off0 + 16 * c);
        __m512i e = _mm512_setzero_si512();
        if constexpr (W1 == 1) e = _mm512_multishift_epi64_epi8(hctrl, qwords4<2>(rp, off1 + 8 * c));
        __m512i x[4];
        lookups4<W1>(z, e, tab, x);
        for (int s = 0; s < 4; ++s) {
          for (int jj = 0; jj < 4; ++jj) {
            const __m512i qv = _mm512_broadcast_i32x4(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(q[jj] + 64 * c + 16 * s)));
            a[jj][s & 1] = _mm512_dpbusd_epi32(a[jj][s & 1], x[s], qv);
          }
        }
      }
      __m512i sums[4];
      for (int jj = 0; jj < 4; ++jj) sums[jj] = _mm512_add_epi32(a[jj][0], a[jj][1]);
      lanes_store(sums, nr, j0, G, dots, ld, r0);
    }
  }
}

// Four vectors of centroid bytes (sums t = 0..3 of a quad of rows).
struct Quad4 {
  __m512i x0, x1, x2, x3;
};

// acc += vpdpbusd(a: unsigned bytes, b: signed bytes) on one register. With
// the intrinsic, GCC 12 kept each of the V kernels' 16 loop-carried sums in
// two registers, copied them every step and spilled some (94 instructions
// a step of 16 vpdpbusd; 55 this way). Sums in an array went to memory
// when they were asm operands: values_frame holds 16 named ones.
TKV_AVX512_INT8 __attribute__((always_inline)) inline void dpbusd_to(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// The V kernels' frame (values_lanes2, values_nib4): per group of up to 4
// queries their weight bytes (weights4), and per 64-coordinate chunk u four
// int32 sums a query, to which each quad g of rows adds its centroid bytes
// quad(u, g) (sum t: x0 .. x3) times the query's 4 weight bytes, then put
// into acc at 64u + pos[t] (sixteen coordinates each, in the kernel's
// order) times the group's scales. n <= 16 NV rows.
template <int NCH, int NV, class Quad>
TKV_AVX512_INT8 __attribute__((always_inline)) inline void values_frame(int n, const float* w, int G, int ldw,
                                                                         float cs, float* acc, const int (&pos)[4],
                                                                         PrefetchLines& pf, Quad&& quad) {
  const int dp = 64 * NCH, ng = (n + 3) / 4;
  const int quads = std::max(1, (G + 3) / 4 * NCH * ng);  // (steps of quad below)
  const int per = (pf.count() + quads - 1) / quads;         // lines a step
  for (int j0 = 0; j0 < G; j0 += 4) {
    float f[4];
    int32_t w4[4][4 * NV];
    if (!weights4<NV>(w, n, G, j0, ldw, cs, f, w4)) continue;
    with_count512(std::min(4, G - j0), [&](auto nq) TKV_AVX512_INT8 __attribute__((always_inline)) {
      constexpr int NQ = decltype(nq)::value;  // (a last group's absent queries take no work)
      for (int u = 0; u < NCH; ++u) {
        __m512i a00 = _mm512_setzero_si512(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00,
                a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
        for (int g = 0; g < ng; ++g) {
          pf.step(per);
          const Quad4 x = quad(u, g);
          auto add = [&](__m512i& s0, __m512i& s1, __m512i& s2, __m512i& s3, int jj)
                         TKV_AVX512_INT8 __attribute__((always_inline)) {
            const __m512i b = _mm512_set1_epi32(w4[jj][g]);
            dpbusd_to(s0, b, x.x0);
            dpbusd_to(s1, b, x.x1);
            dpbusd_to(s2, b, x.x2);
            dpbusd_to(s3, b, x.x3);
          };
          add(a00, a01, a02, a03, 0);
          if constexpr (NQ > 1) add(a10, a11, a12, a13, 1);
          if constexpr (NQ > 2) add(a20, a21, a22, a23, 2);
          if constexpr (NQ > 3) add(a30, a31, a32, a33, 3);
        }
        auto flush = [&](__m512i s0, __m512i s1, __m512i s2, __m512i s3, int jj)
                         TKV_AVX512_INT8 __attribute__((always_inline)) {
          if (f[jj] == 0.0f) return;
          const __m512 fv = _mm512_set1_ps(f[jj]);
          float* out = acc + static_cast<size_t>(j0 + jj) * dp + 64 * u;
          const __m512i sv[4] = {s0, s1, s2, s3};
          for (int t = 0; t < 4; ++t)
            _mm512_storeu_ps(out + pos[t],
                             _mm512_fmadd_ps(_mm512_cvtepi32_ps(sv[t]), fv, _mm512_loadu_ps(out + pos[t])));
        };
        flush(a00, a01, a02, a03, 0);
        if constexpr (NQ > 1) flush(a10, a11, a12, a13, 1);
        if constexpr (NQ > 2) flush(a20, a21, a22, a23, 2);
        if constexpr (NQ > 3) flush(a30, a31, a32, a33, 3);
      }
    });
  }
}

// Values, one part of 2-bit codes (+ a 1-bit plane when W1 = 1), dp = 64
// NCH, n <= 16 NV rows; acc in int8_values_order. Per 64-coordinate chunk c and
// 4 rows: the rows' 16 low-plane bytes interleaved so that dword i holds
// byte i of rows 0..3; (that >> 2s)'s bytes index coordinate 64c + 4i + s
// of the 4 rows, and vpdpbusd with the 4 rows' weight bytes sums over them.
template <int W1, int NCH, int NV>
TKV_AVX512_INT8 void values_lanes2(const RowLayout::Part& part, const uint8_t* table, float cs,
                                   const uint8_t* const* rows, int n, const float* w, int G, int ldw, float* acc,
                                   PrefetchLines& pf) {
  const Tables2 tab = tables2(table);  // Int8Keys::lanes_vt2 (signed c8)
  const LaneConsts& lc = lane_consts();
  const __m512i ileave = _mm512_load_si512(lc.ileave), hileave = _mm512_load_si512(lc.hileave);
  const __m512i vnib = _mm512_load_si512(lc.vnib);
  const __m512i il[2] = {_mm512_load_si512(lc.il[0]), _mm512_load_si512(lc.il[1])};
  const uint8_t(*hil)[64] = lc.hil2[NCH / 4];  // (dp 128, 256: chunk u's control)
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  static constexpr int pos[4] = {0, 16, 32, 48};  // sums t = s: code position s of bytes 0..15
  values_frame<NCH, NV>(n, w, G, ldw, cs, acc, pos, pf, [&](int u, int g) TKV_AVX512_INT8 __attribute__((always_inline)) {
    const uint8_t* rp[4];
    for (int i = 0; i < 4; ++i) rp[i] = rows[std::min(4 * g + i, n - 1)];  // past n: weight 0
    // dword i byte m <- row m's byte 16u + i: at dp 128 and 256 from two
    // vectors of two rows' 32 bytes by one vpermt2b (the chunks u and
    // u ^ 1 of each; two inserts and a permute against lanes4's three and
    // a permute), at dp 64 from lanes4 (32 bytes would read past the plane)
    __m512i z;
    if constexpr (NCH >= 2) {
      const size_t o = off0 + 32 * (u / 2);
      z = _mm512_permutex2var_epi8(two_rows(rp[0] + o, rp[1] + o), il[u % 2], two_rows(rp[2] + o, rp[3] + o));
    } else {
      z = _mm512_permutexvar_epi8(ileave, lanes4(rp, off0 + 16 * u));
    }
    // (tq3) the 4 rows' high bits of coordinates 64u + 4i .. +3 in bits
    // 4-7 of dword i's bytes, by one vpmultishiftqb (it shares its pipe
    // with vpdpbusd on Zen 4: one a step, where one a code position cost
    // 1.5 cycles a row) from the rows' bytes in hileave's order (at dp 128
    // and 256 by one vpermt2b from two vectors of two rows' planes)
    __m512i hh = _mm512_setzero_si512();
    if constexpr (W1 == 1) {
      __m512i hb;
      if constexpr (NCH == 2) {
        hb = _mm512_permutex2var_epi8(_mm512_castsi256_si512(two16(rp[0] + off1, rp[1] + off1)),
                                      _mm512_load_si512(hil[u]),
                                      _mm512_castsi256_si512(two16(rp[2] + off1, rp[3] + off1)));
      } else if constexpr (NCH == 4) {
        hb = _mm512_permutex2var_epi8(two_rows(rp[0] + off1, rp[1] + off1), _mm512_load_si512(hil[u]),
                                      two_rows(rp[2] + off1, rp[3] + off1));
      } else {
        hb = _mm512_permutexvar_epi8(hileave, qwords4<1>(rp, off1 + 8 * u));
      }
      hh = _mm512_multishift_epi64_epi8(vnib, hb);
    }
    __m512i x[4];
    lookups4<W1>(z, hh, tab, x);
    return Quad4{x[0], x[1], x[2], x[3]};
  });
}

// Keys on 16 rows transposed by dwords (dp 128 and 256): where the lane
// kernel above puts 4 rows side by side and sums each row's 16 products
// across its 128-bit lane at the end, here dword r of a vector is row r's
// dword k of the plane, so one lookup and one vpdpbusd a query serve 16
// rows, every lane accumulates its own row's dot (no reduction, no
// shuffle at the end), and the query's 4 bytes are vpdpbusd's broadcast
// memory operand (m32bcst, written in asm: GCC 12 loaded them by a
// separate vpbroadcastd each, 8 a row; the lane kernel's 16-byte query
// broadcasts were 1 a cycle). Byte e of dword k holds
// coordinates 16k + 4e + s (s: the code in bits 2s..2s+1), which is
// int8_query_order's dword 16(k/4) + 4s + k%4: the same query order and
// the same integers as the lane kernel. Per 16 rows at dp 128 and G 4:
// the transposition (8 row loads, 8 inserts, 16 unpacks, 8 lane shuffles),
// 32 lookups, 24 shifts, 128 vpdpbusd. Measured alone in L1 on a Zen 4
// EPYC (3.67 GHz, one thread, 32-row calls, G 4, cycles a row, the lane
// kernel or tq4's row kernel -> this one): dp 128 tq2 21.8 -> 10.5, tq3
// 28.0 -> 14.8, tq4 21.4 -> 14.6; dp 256 36.2 -> 23.0, 44.6 -> 29.8, 36.2
// -> 27.2 (RESULTS §45). A 64K step at GQA 4, 2 threads, with this and
// values_nib4: 16-27 % less time (tq4 16-18 %, tq3 17-26 %, tq2 20-27 %).
// The broadcast operand, 64-row calls: tq4 14.1 -> 13.6, tq3 14.9 -> 13.8,
// tq2 10.8 -> 9.5 (RESULTS §46).

// 16 rows' 32 bytes at off -> Z[0..7], Z[k] dword r = row r's dword k
// (rows 0-3 and 4-7 in the halves of v[0..3], 8-11 and 12-15 in v[4..7]:
// the unpacks and the lane shuffle then leave them in order).
TKV_AVX512_INT8 __attribute__((always_inline)) inline void transpose16x8(const uint8_t* const* rp, size_t off,
                                                                          __m512i* Z) {
  __m512i v[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + off))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i + 4] + off)), 1);
    v[i + 4] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i + 8] + off))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i + 12] + off)), 1);
  }
  __m512i u[8];
#pragma GCC unroll 2
  for (int h = 0; h < 8; h += 4) {
    const __m512i t0 = _mm512_unpacklo_epi32(v[h], v[h + 1]), t1 = _mm512_unpackhi_epi32(v[h], v[h + 1]);
    const __m512i t2 = _mm512_unpacklo_epi32(v[h + 2], v[h + 3]), t3 = _mm512_unpackhi_epi32(v[h + 2], v[h + 3]);
    u[h] = _mm512_unpacklo_epi64(t0, t2);
    u[h + 1] = _mm512_unpackhi_epi64(t0, t2);
    u[h + 2] = _mm512_unpacklo_epi64(t1, t3);
    u[h + 3] = _mm512_unpackhi_epi64(t1, t3);
  }
  // u[d], d < 4: 128-bit lanes = rows 0-3 dword d, rows 0-3 dword d+4,
  // rows 4-7 dword d, rows 4-7 dword d+4; u[4+d] the same for rows 8-15.
#pragma GCC unroll 4
  for (int d = 0; d < 4; ++d) {
    Z[d] = _mm512_shuffle_i32x4(u[d], u[4 + d], 0x88);
    Z[d + 4] = _mm512_shuffle_i32x4(u[d], u[4 + d], 0xDD);
  }
}

// 16 rows' 16 bytes at off -> Z[0..3] likewise (row 4L + i in lane L of v[i]).
TKV_AVX512_INT8 __attribute__((always_inline)) inline void transpose16x4(const uint8_t* const* rp, size_t off,
                                                                          __m512i* Z) {
  __m512i v[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const uint8_t* const q[4] = {rp[i], rp[4 + i], rp[8 + i], rp[12 + i]};
    v[i] = lanes4(q, off);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
  Z[0] = _mm512_unpacklo_epi64(t0, t2);
  Z[1] = _mm512_unpackhi_epi64(t0, t2);
  Z[2] = _mm512_unpacklo_epi64(t1, t3);
  Z[3] = _mm512_unpackhi_epi64(t1, t3);
}

// acc += vpdpbusd(x, the 4 bytes at p in every dword): p's dword as the
// instruction's broadcast memory operand (q8 is int8_t at any alignment:
// the instruction's load takes any).
TKV_AVX512_INT8 __attribute__((always_inline)) inline void dpbusd_bcst(__m512i& acc, __m512i x, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*reinterpret_cast<const int32_t*>(p)));
}

// NQ queries from j0 on, 16 rows (rp; the store masked to m), one plane of
// BITS-bit codes (2 or 4) at off0 (+ a 1-bit plane at off1 when W1 = 1),
// dp = 64 NCH.
template <int BITS, int W1, int NCH, int NQ>
TKV_AVX512_INT8 __attribute__((always_inline)) inline void t16_queries(const uint8_t* const* rp, size_t off0,
                                                                        size_t off1, __m512i tab,
                                                                        const Tables2& tab2,
                                                                        const __m512i* hctl, const int8_t* q8,
                                                                        int j0, int32_t* dots, int ld, int r0,
                                                                        __mmask16 m, PrefetchLines& pf, int perk) {
  const int dp = 64 * NCH;
  __m512i a[NQ][2];
#pragma GCC unroll 8
  for (int jj = 0; jj < NQ; ++jj) a[jj][0] = a[jj][1] = _mm512_setzero_si512();
  const int8_t* q[NQ];
#pragma GCC unroll 8
  for (int jj = 0; jj < NQ; ++jj) q[jj] = q8 + static_cast<size_t>(j0 + jj) * dp;
  constexpr int S = 8 / BITS, per = 16 / S;  // codes a byte; plane dwords a 64-coordinate chunk
  for (int c = 0; c < NCH * BITS / 4; ++c) {  // 32 plane bytes (32 S coordinates) at a time
    __m512i Z[8], H[4];
    transpose16x8(rp, off0 + 32 * c, Z);
    if constexpr (W1 == 1) transpose16x4(rp, off1 + 16 * c, H);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      pf.step(perk);
      const int kk = 8 * c + k;
      __m512i x[4];
      if constexpr (BITS == 2) {
        __m512i hh = _mm512_setzero_si512();
        if constexpr (W1 == 1) hh = _mm512_multishift_epi64_epi8(hctl[k % 2], H[k / 2]);
        lookups4<W1>(Z[k], hh, tab2, x);
      }
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) {
        // (tq4: each nibble looked up where it is used, as before lookups4;
        // both ahead of the dots measured the same, RESULTS §52)
        if constexpr (BITS == 4) x[s] = _mm512_permutexvar_epi8(s ? _mm512_srli_epi16(Z[k], 4) : Z[k], tab);
        const int qd = 16 * (kk / per) + per * s + kk % per;
#pragma GCC unroll 8
        for (int jj = 0; jj < NQ; ++jj)
          dpbusd_bcst(a[jj][NQ > 4 ? 0 : s & 1], x[s], q[jj] + 4 * qd);
      }
    }
  }
#pragma GCC unroll 8
  for (int jj = 0; jj < NQ; ++jj)
    _mm512_mask_storeu_epi32(dots + static_cast<size_t>(j0 + jj) * ld + r0, m,
                             _mm512_add_epi32(a[jj][0], a[jj][1]));
}

template <int BITS, int W1, int NCH>
TKV_AVX512_INT8 void dots_t16(const RowLayout::Part& part, const uint8_t* table, const uint8_t* const* rows, int n,
                              const int8_t* q8, int G, int32_t* dots, int ld, PrefetchLines& pf) {
  static_assert(NCH * BITS % 4 == 0, "32 plane bytes a step");
  // Int8Keys::lanes_table (4-bit codes) or lanes_t2 (2-bit)
  const __m512i tab = _mm512_loadu_si512(table);
  const Tables2 tab2 = BITS == 2 ? tables2(table) : Tables2{tab, tab};
  __m512i hctl[2];
  if constexpr (W1 == 1)
    for (int m = 0; m < 2; ++m) hctl[m] = _mm512_load_si512(lane_consts().hctl[m]);
  const size_t off0 = part.planes[0].offset, off1 = W1 ? part.planes[1].offset : 0;
  // pf's lines spread over the lookup steps (8 a 16-row step and 32 plane
  // bytes); a step of 16 rows at a time left tq4's keys 7 % slower (§53).
  const int steps = std::max(1, (n + 15) / 16) * (NCH * BITS / 4) * 8;
  const int perk = (pf.count() + steps - 1) / steps;
  for (int r0 = 0; r0 < n; r0 += 16) {
    const uint8_t* last[16];
    const uint8_t* const* rp = rows + r0;
    if (n - r0 < 16) {  // past n: the last row again, not stored
      for (int i = 0; i < 16; ++i) last[i] = rows[std::min(r0 + i, n - 1)];
      rp = last;
    }
    const __mmask16 m = n - r0 >= 16 ? static_cast<__mmask16>(0xFFFF)
                                     : static_cast<__mmask16>((1u << (n - r0)) - 1);
    int j0 = 0;
    // 8 queries a pass (GQA 8: one transposition for all; one sum a query,
    // 8 chains of vpdpbusd, as 4 queries' two), then 4, then the rest.
    for (; j0 + 8 <= G; j0 += 8) t16_queries<BITS, W1, NCH, 8>(rp, off0, off1, tab, tab2, hctl, q8, j0, dots, ld, r0, m, pf, perk);
    for (; j0 + 4 <= G; j0 += 4) t16_queries<BITS, W1, NCH, 4>(rp, off0, off1, tab, tab2, hctl, q8, j0, dots, ld, r0, m, pf, perk);
    switch (G - j0) {
      case 3: t16_queries<BITS, W1, NCH, 3>(rp, off0, off1, tab, tab2, hctl, q8, j0, dots, ld, r0, m, pf, perk); break;
      case 2: t16_queries<BITS, W1, NCH, 2>(rp, off0, off1, tab, tab2, hctl, q8, j0, dots, ld, r0, m, pf, perk); break;
      case 1: t16_queries<BITS, W1, NCH, 1>(rp, off0, off1, tab, tab2, hctl, q8, j0, dots, ld, r0, m, pf, perk); break;
      default: break;
    }
  }
}

// Values of 4-bit codes (tq4, dp 128 and 256): per 4 rows and 64
// coordinates, the rows' 32 code bytes go into two vectors (two rows each)
// and one two-source byte permute (vpermt2b) a half gives dword i byte m =
// row m's byte 16h + i, whose nibble s is coordinate 64u + 32h + 2i + s:
// then a shift, a lookup and vpdpbusd with the rows' weight bytes, as the
// lane kernel above does for 2-bit codes. Accumulators in the 4-bit order
// (fill_order: position 32s + b <-> coordinate 2b + s of a chunk). The row
// kernel (values_fixed) looked each row up alone and interleaved 4 rows'
// centroid bytes by 8 unpacks: 23.3 cycles a row at dp 128 and G 4 against
// 18.6 here, 40.5 against 33.0 at dp 256 (Zen 4, alone in L1; RESULTS §45).

template <int NCH>
TKV_AVX512_INT8 void values_nib4(const RowLayout::Part& part, const uint8_t* table, float cs,
                                 const uint8_t* const* rows, int n, const float* w, int G, int ldw, float* acc,
                                 PrefetchLines& pf) {
  const __m512i tab = _mm512_loadu_si512(table);  // Int8Keys::lanes_vtable (signed c8, period 16)
  const __m512i il[2] = {_mm512_load_si512(lane_consts().il[0]), _mm512_load_si512(lane_consts().il[1])};
  const size_t off0 = part.planes[0].offset;
  static constexpr int pos[4] = {0, 32, 16, 48};  // sums t = 2h + s: nibble s of bytes 16h .. 16h+15
  values_frame<NCH, 4>(n, w, G, ldw, cs, acc, pos, pf, [&](int u, int g) TKV_AVX512_INT8 __attribute__((always_inline)) {
    const uint8_t* rp[4];
    for (int i = 0; i < 4; ++i) rp[i] = rows[std::min(4 * g + i, n - 1)] + off0 + 32 * u;  // past n: weight 0
    const __m512i a = two_rows(rp[0], rp[1]), b = two_rows(rp[2], rp[3]);
    const __m512i z0 = _mm512_permutex2var_epi8(a, il[0], b), z1 = _mm512_permutex2var_epi8(a, il[1], b);
    return Quad4{_mm512_permutexvar_epi8(z0, tab), _mm512_permutexvar_epi8(_mm512_srli_epi16(z0, 4), tab),
                 _mm512_permutexvar_epi8(z1, tab), _mm512_permutexvar_epi8(_mm512_srli_epi16(z1, 4), tab)};
  });
}

template <class Fn>
TKV_AVX512_INT8 void with_nch(int dp, Fn&& fn) {
  switch (dp) {
    case 64: return fn(Int<1>{});
    case 128: return fn(Int<2>{});
    default: return fn(Int<4>{});
  }
}

TKV_AVX512_INT8 void dots_lanes_avx512(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                       const int8_t* q8, int G, int32_t* dots, int ld, PrefetchLines& pf) {
  const RowLayout::Part& p = L.parts[0];
  with_nch(k.dp, [&](auto nch) TKV_AVX512_INT8 {
    if constexpr (nch % 2 == 0) {  // dp 128, 256: 16 rows transposed
      if (p.planes[0].width == 4) {
        dots_t16<4, 0, nch>(p, k.lanes_table, rows, n, q8, G, dots, ld, pf);
      } else if (p.nplanes > 1) {
        dots_t16<2, 1, nch>(p, k.lanes_t2[0], rows, n, q8, G, dots, ld, pf);
      } else {
        dots_t16<2, 0, nch>(p, k.lanes_t2[0], rows, n, q8, G, dots, ld, pf);
      }
    } else if (p.nplanes > 1) {
      dots_lanes2<1, nch>(p, k.lanes_t2[0], rows, n, q8, G, dots, ld);
    } else {
      dots_lanes2<0, nch>(p, k.lanes_t2[0], rows, n, q8, G, dots, ld);
    }
  });
}

TKV_AVX512_INT8 void values_lanes_avx512(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                                         const float* w, int G, int ldw, float* acc, PrefetchLines& pf) {
  const RowLayout::Part& p = L.parts[0];
  with_nch(k.dp, [&](auto nch) TKV_AVX512_INT8 {
    if (p.planes[0].width == 4) {
      values_nib4<nch>(p, k.lanes_vtable, k.cs, rows, n, w, G, ldw, acc, pf);
    } else if (p.nplanes > 1 && n > 64) {
      values_lanes2<1, nch, 8>(p, k.lanes_vt2[0], k.cs, rows, n, w, G, ldw, acc, pf);
    } else if (p.nplanes > 1) {
      values_lanes2<1, nch, 4>(p, k.lanes_vt2[0], k.cs, rows, n, w, G, ldw, acc, pf);
    } else if (n > 64) {  // tq2's 128-row blocks (int8_values_rows)
      values_lanes2<0, nch, 8>(p, k.lanes_vt2[0], k.cs, rows, n, w, G, ldw, acc, pf);
    } else {
      values_lanes2<0, nch, 4>(p, k.lanes_vt2[0], k.cs, rows, n, w, G, ldw, acc, pf);
    }
  });
}

#else

bool int8_avx512_cpu() { return false; }

#endif

// --- Which kernels run: the best this CPU has, or the one a test pins ---

namespace {
// The default: the widest kernel this CPU runs. On AVX2 the integer path
// gains from the lookups, not the products (vpmaddwd and an add do per two
// instructions what two FMAs do), and still halved bench-attn's time at 64K
// on Zen 3 (RESULTS §31). TKV_INT8_TARGET=avx512, avx2 or none in the
// environment, or int8_set_target, chooses another.
Int8Target best_target() {
  if (const char* e = std::getenv("TKV_INT8_TARGET")) {
    const std::string v = e;
    if (v == "none") return Int8Target::kNone;
    if (v == "avx2" && int8_avx2_cpu()) return Int8Target::kAvx2;
    if (v == "avx512" && int8_avx512_cpu()) return Int8Target::kAvx512;
  }
  if (int8_avx512_cpu()) return Int8Target::kAvx512;
  if (int8_avx2_cpu()) return Int8Target::kAvx2;
  return Int8Target::kNone;
}
std::atomic<int> g_target{-1};
}  // namespace

bool int8_target_supported(Int8Target t) {
  switch (t) {
    case Int8Target::kNone: return true;
    case Int8Target::kAvx2: return int8_avx2_cpu();
    case Int8Target::kAvx512: return int8_avx512_cpu();
  }
  return false;
}
Int8Target int8_target() {
  int t = g_target.load(std::memory_order_relaxed);
  if (t < 0) {
    t = static_cast<int>(best_target());
    g_target.store(t, std::memory_order_relaxed);
  }
  return static_cast<Int8Target>(t);
}
bool int8_set_target(Int8Target t) {
  if (!int8_target_supported(t)) return false;
  g_target.store(static_cast<int>(t), std::memory_order_relaxed);
  return true;
}
bool int8_keys_cpu() { return int8_target() != Int8Target::kNone; }

#if TKV_INT8_KEYS_X86
#define TKV_INT8_AVX512 (int8_target() == Int8Target::kAvx512)
#define TKV_INT8_AVX2 (int8_target() == Int8Target::kAvx2)
#else
#define TKV_INT8_AVX512 false
#define TKV_INT8_AVX2 false
#endif

// The query bytes: the AVX-512 quantizers where they run, else the
// specification itself (once per query and call: no AVX2 version pays).
float int8_quantize_query(const float* q, int dp, int8_t* q8, int32_t* bias) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX512) return quantize_query_avx512(q, dp, q8, bias);
#endif
  return int8_quantize_query_ref(q, dp, q8, bias);
}
float int8_quantize_query16(const float* q, int dp, int wmax, int16_t* q16) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX512) return quantize_query16_avx512(q, dp, wmax, q16);
#endif
  return int8_quantize_query16_ref(q, dp, wmax, q16);
}
float int8_quantize_residual(const float* q, int dp, float qs, const int8_t* q8, int8_t* r8, int32_t* bias) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX512) return quantize_residual_avx512(q, dp, qs, q8, r8, bias);
#endif
  return int8_quantize_residual_ref(q, dp, qs, q8, r8, bias);
}
namespace {
// The kernels without the lane kernels (natural order).
void dots2_plain(const Int8Keys& k, const Int8Keys* k2, const RowLayout& L, const uint8_t* const* rows, int n,
                 const int8_t* q8, int G, int32_t* dots, int G2, int32_t* dots2, int ld) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX512) return dots2_avx512(k, k2, L, rows, n, q8, G, dots, G2, dots2, ld);
  if (TKV_INT8_AVX2) return int8_dots2_avx2(k, k2, L, rows, n, q8, G, dots, G2, dots2, ld);
#endif
  int8_dots_ref(k, L, rows, n, q8, G, dots, ld);
  if (k2) int8_dots_ref(*k2, L, rows, n, q8, G2, dots2, ld);
}
void values_plain(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const float* w, int G,
                  int ldw, float* acc) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX512) return values_avx512(k, L, rows, n, w, G, ldw, acc);
  if (TKV_INT8_AVX2) return int8_values_avx2(k, L, rows, n, w, G, ldw, acc);
#endif
  int8_values_ref(k, L, rows, n, w, G, ldw, acc);
}
// Whether the lane kernels run (the flags, and AVX-512 in use).
bool lanes_run(bool flag) {
#if TKV_INT8_KEYS_X86
  return flag && TKV_INT8_AVX512;
#else
  (void)flag;
  return false;
#endif
}
// Whether AVX2's ordered decode runs: K (not with residual bytes or words) or V.
bool avx2_ordered(const Int8Keys& k, bool keys) {
#if TKV_INT8_KEYS_X86
  return k.avx2_sig != 0 && TKV_INT8_AVX2 && !(keys && (k.residual || k.wide));
#else
  (void)k, (void)keys;
  return false;
#endif
}
bool ordered_dots(const Int8Keys& k) { return lanes_run(k.lanes_dots) || avx2_ordered(k, true); }
}  // namespace

int int8_values_rows(const Int8Keys& k) {
  if (k.vlut || avx2_ordered(k, false) || !lanes_run(k.lanes_values)) return 32;
  // tq2 (one 2-bit plane) and tq3 (+ a 1-bit plane): 128 rows a block.
  // Per row they cost the least, so a block's fixed costs weigh most: tq2
  // at one thread, 64K, G 4, 10.4-11.0 ns a row and head against 11.1-11.3
  // at 64 (RESULTS §47). tq3's 128 rows lost from DRAM while the next
  // block's prefetch came in bursts (+12 %, §52); with the lines requested
  // as the kernels go, 12.47 -> 12.00 ns (-4 %, §53). tq4 stays at 64 (no
  // faster at 128 then; two 128-row blocks of K and V in flight outgrew L1
  // in §46), with its own instantiation of the block code
  // (attention_simd.cpp's HeadBlock<64>): 128 chosen at run time cost it
  // 2-3 % (§47).
  return k.avx2_sig == 20 || k.avx2_sig == 21 ? 128 : 64;
}

namespace {
bool ordered_values(const Int8Keys& k) { return lanes_run(k.lanes_values) || avx2_ordered(k, false); }
// The orders (score_int8.h): 2-bit planes, or the 4-bit one (AVX2's
// ordered decode, and AVX-512's transposed keys for tq4).
void fill_order(const Int8Keys& k, int* perm) {
  const bool nib = k.avx2_sig == 40;
  for (int c = 0; c < k.dp / 64; ++c)
    for (int p = 0; p < 64; ++p)
      perm[64 * c + p] = nib ? 64 * c + 2 * (p % 32) + p / 32 : 64 * c + 4 * (p % 16) + p / 16;
}
// G rows of dp: out[j][perm[p]] = in[j][p] (to natural: perm the order) or
// out[j][p] = in[j][perm[p]] (to the order).
template <class T>
void reorder(const T* in, T* out, int G, int dp, const int* perm, bool to_natural) {
  for (int j = 0; j < G; ++j)
    for (int p = 0; p < dp; ++p) {
      const size_t r = static_cast<size_t>(j) * dp;
      if (to_natural) {
        out[r + perm[p]] = in[r + p];
      } else {
        out[r + p] = in[r + perm[p]];
      }
    }
}
}  // namespace

bool int8_query_order(const Int8Keys& k, int* perm) {
  for (int p = 0; p < k.dp; ++p) perm[p] = p;
  if (!ordered_dots(k)) return false;
  fill_order(k, perm);
  return true;
}
bool int8_values_order(const Int8Keys& k, int* perm) {
  for (int p = 0; p < k.dp; ++p) perm[p] = p;
  if (!ordered_values(k)) return false;
  fill_order(k, perm);
  return true;
}

// (Where no ordered kernel runs, the orders are natural.)
void int8_dots_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int8_t* q8,
                       int G, int32_t* dots, int ld, PrefetchSpan pf) {
  PrefetchLines lines(pf);
#if TKV_INT8_KEYS_X86
  if (lanes_run(k.lanes_dots)) {
    dots_lanes_avx512(k, L, rows, n, q8, G, dots, ld, lines);
    return lines.rest();
  }
  if (avx2_ordered(k, true))
    return lines.around([&] { int8_dots2_avx2(k, nullptr, L, rows, n, q8, G, dots, 0, nullptr, ld, true); });
#endif
  lines.around([&] { dots2_plain(k, nullptr, L, rows, n, q8, G, dots, 0, nullptr, ld); });
}

void int8_values_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const float* w,
                         int G, int ldw, float* acc, PrefetchSpan pf) {
  PrefetchLines lines(pf);
#if TKV_INT8_KEYS_X86
  if (lanes_run(k.lanes_values) && !avx2_ordered(k, false) && n >= 1 && n <= int8_values_rows(k)) {
    values_lanes_avx512(k, L, rows, n, w, G, ldw, acc, lines);
    return lines.rest();
  }
#endif
  lines.around([&] {
#if TKV_INT8_KEYS_X86
    if (avx2_ordered(k, false)) return int8_values_avx2(k, L, rows, n, w, G, ldw, acc, true);
    if (lanes_run(k.lanes_values)) {
      int perm[1024];  // (more rows than one block: in the order, through natural)
      int8_values_order(k, perm);
      std::vector<float> nat(static_cast<size_t>(G) * k.dp);
      reorder(acc, nat.data(), G, k.dp, perm, true);
      values_plain(k, L, rows, n, w, G, ldw, nat.data());
      return reorder(nat.data(), acc, G, k.dp, perm, false);
    }
#endif
    values_plain(k, L, rows, n, w, G, ldw, acc);
  });
}

// The natural-order functions: where the lane kernels run, the queries (or
// accumulators) are put in their order and back.
void int8_dots16(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int16_t* q16, int G,
                 int32_t* dots, int ld) {
#if TKV_INT8_KEYS_X86
  if (k.wide && TKV_INT8_AVX512) return dots16_avx512(k, L, rows, n, q16, G, dots, ld);
  if (k.wide && TKV_INT8_AVX2) return int8_dots16_avx2(k, L, rows, n, q16, G, dots, ld);
#endif
  int8_dots16_ref(k, L, rows, n, q16, G, dots, ld);
}
void int8_dots2(const Int8Keys& k, const Int8Keys* k2, const RowLayout& L, const uint8_t* const* rows, int n,
                const int8_t* q8, int G, int32_t* dots, int G2, int32_t* dots2, int ld) {
  if (k2 || !ordered_dots(k)) return dots2_plain(k, k2, L, rows, n, q8, G, dots, G2, dots2, ld);
  int perm[1024];
  int8_query_order(k, perm);
  std::vector<int8_t> ord(static_cast<size_t>(G) * k.dp);
  reorder(q8, ord.data(), G, k.dp, perm, false);
  int8_dots_ordered(k, L, rows, n, ord.data(), G, dots, ld);
}
void int8_dots(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const int8_t* q8, int G,
               int32_t* dots, int ld) {
  int8_dots2(k, nullptr, L, rows, n, q8, G, dots, 0, nullptr, ld);
}
float int8_lut_build(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX2) return int8_lut_build_avx2(k, q, lut, bias);
#endif
  return int8_lut_build_ref(k, q, lut, bias);
}
void int8_lut_dots(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const uint8_t* lut,
                   int G, int32_t* dots, int ld) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX2 && k.lut) return int8_lut_dots_avx2(k, L, rows, n, lut, G, dots, ld);
#endif
  int8_lut_dots_ref(k, L, rows, n, lut, G, dots, ld);
}
void int8_vlut_values_ordered(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n,
                              const float* w, int G, int ldw, float* acc) {
#if TKV_INT8_KEYS_X86
  if (TKV_INT8_AVX2 && k.vlut) return int8_vlut_values_avx2(k, L, rows, n, w, G, ldw, acc);
#endif
  int perm[1024];  // (the specification in natural order, through the order)
  int8_values_order(k, perm);
  std::vector<float> nat(static_cast<size_t>(G) * k.dp);
  reorder(acc, nat.data(), G, k.dp, perm, true);
  int8_vlut_values_ref(k, L, rows, n, w, G, ldw, nat.data());
  reorder(nat.data(), acc, G, k.dp, perm, false);
}
void int8_values(const Int8Keys& k, const RowLayout& L, const uint8_t* const* rows, int n, const float* w, int G,
                 int ldw, float* acc) {
  if (!ordered_values(k) || n < 1 || (n > int8_values_rows(k) && !avx2_ordered(k, false)))
    return values_plain(k, L, rows, n, w, G, ldw, acc);
  int perm[1024];
  int8_values_order(k, perm);
  std::vector<float> ord(static_cast<size_t>(G) * k.dp);
  reorder(acc, ord.data(), G, k.dp, perm, false);
  int8_values_ordered(k, L, rows, n, w, G, ldw, ord.data());
  reorder(ord.data(), acc, G, k.dp, perm, true);
}

}  // namespace tkv::attn
