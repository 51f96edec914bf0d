// Calibrated coding (tqc): the eigen solver, the fitted basis, bit allocation,
// round trips, and fused attention on per-head calibrated rows against
// float64 attention over the decoded rows (the kernel adds no error).
#include <gtest/gtest.h>

#include "exact_keys.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "attention/attention.h"
#include "attn_case.h"
#include "codec/calibrated.h"
#include "codec/eigen.h"
#include "codec/format.h"
#include "codec/trellis.h"
#include "util/fp16.h"
#include "util/rng.h"
#include "util/simd_targets.h"

namespace tkv {
namespace {

// n rows x = mean + sum_i sqrt(var_i) g_i P_i of a head basis.
std::vector<float> draw_rows(const HeadBasis& b, size_t n, uint64_t seed) {
  Rng rng(seed);
  const int d = b.d;
  std::vector<float> x(n * d);
  for (size_t t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      const double g = rng.gaussian() * std::sqrt(double(b.var[c]));
      for (int i = 0; i < d; ++i) x[t * d + i] += float(g * b.basis[size_t(c) * d + i]);
    }
  for (size_t t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) x[t * d + i] += b.mean[i];
  return x;
}

double rel_mse(const Codec& c, const std::vector<float>& x, const float* mu = nullptr) {
  const int d = c.dim();
  const size_t n = x.size() / d;
  std::vector<float> xc = x;
  if (mu)
    for (size_t t = 0; t < n; ++t)
      for (int i = 0; i < d; ++i) xc[t * d + i] -= mu[i];
  std::vector<uint8_t> q(n * c.row_bytes());
  EXPECT_TRUE(c.quantize(xc.data(), n, q.data()).ok());
  std::vector<float> y(xc.size());
  c.dequantize(q.data(), n, y.data());
  double e = 0, s = 0;
  for (size_t i = 0; i < xc.size(); ++i) {
    e += std::pow(double(xc[i]) - y[i], 2);
    s += double(xc[i]) * xc[i];
  }
  return e / s;
}

TEST(Calibrated, EigenSolverDiagonalisesSymmetricMatrices) {
  for (int n : {1, 2, 7, 64, 130}) {
    Rng rng(n);
    std::vector<double> a(size_t(n) * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j <= i; ++j) a[size_t(i) * n + j] = a[size_t(j) * n + i] = rng.gaussian();
    const SymEigen e = sym_eigen(a, n);
    for (int r = 0; r < n; ++r) {
      if (r > 0) { EXPECT_GE(e.values[r - 1], e.values[r]); }
      for (int s = 0; s < n; ++s) {  // orthonormal rows
        double dot = 0;
        for (int k = 0; k < n; ++k) dot += e.vectors[size_t(r) * n + k] * e.vectors[size_t(s) * n + k];
        EXPECT_NEAR(dot, r == s ? 1.0 : 0.0, 1e-10);
      }
      for (int i = 0; i < n; ++i) {  // A v = lambda v
        double av = 0;
        for (int k = 0; k < n; ++k) av += a[size_t(i) * n + k] * e.vectors[size_t(r) * n + k];
        EXPECT_NEAR(av, e.values[r] * e.vectors[size_t(r) * n + i], 1e-9);
      }
    }
  }
}

TEST(Calibrated, FittedBasisIsOrthonormalAndFindsTheVariances) {
  const int d = 48;
  HeadBasis truth = synthetic_head_basis(d, 5);
  for (int i = 0; i < d; ++i) truth.mean[i] = float(i % 5) - 2.0f;
  const auto x = draw_rows(truth, 20000, 9);
  auto fit = fit_head_basis(x.data(), 20000, d);
  ASSERT_TRUE(fit.ok()) << fit.error();
  for (int r = 0; r < d; ++r)
    for (int s = 0; s < d; ++s) {
      double dot = 0;
      for (int k = 0; k < d; ++k) dot += double(fit->basis[size_t(r) * d + k]) * fit->basis[size_t(s) * d + k];
      EXPECT_NEAR(dot, r == s ? 1.0 : 0.0, 1e-6);
    }
  for (int i = 0; i < d; ++i) {
    EXPECT_NEAR(fit->var[i], truth.var[i], 0.06 * truth.var[i] + 1e-3) << i;
    EXPECT_NEAR(fit->mean[i], truth.mean[i], 0.05);
  }
  // Deterministic for the same rows.
  auto again = fit_head_basis(x.data(), 20000, d);
  EXPECT_EQ(fit->basis, again->basis);
  EXPECT_EQ(fit->var, again->var);
  // Bad input is an error, not garbage.
  std::vector<float> bad = x;
  bad[77] = NAN;
  EXPECT_FALSE(fit_head_basis(bad.data(), 100, d).ok());
  EXPECT_FALSE(fit_head_basis(x.data(), 1, d).ok());
}

TEST(Calibrated, AllocationMeetsTheBudgetAndSkipsZeroVariance) {
  std::vector<float> var(64);
  for (int i = 0; i < 64; ++i) var[i] = i < 40 ? std::exp2(-0.2f * i) : 0.0f;
  for (int total : {0, 1, 64, 150, 256, 320}) {
    const auto b = allocate_bits(var, total, 1);
    EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), std::min(total, 40 * 8));
    for (int i = 0; i < 64; ++i) {
      if (i >= 40) { EXPECT_EQ(b[i], 0) << "zero-variance component " << i << " got bits"; }
      if (i > 0) { EXPECT_LE(b[i], b[i - 1]); }
    }
  }
  const auto g = allocate_bits(var, 256, 16);
  EXPECT_EQ(std::accumulate(g.begin(), g.end(), 0), 256);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(g[i], g[i / 16 * 16]);
  EXPECT_EQ(g[63], 0);  // the all-zero group gets nothing
  // A codec on that basis: the zero-variance components cost no bytes.
  HeadBasis hb = synthetic_head_basis(64, 3);
  hb.var = var;
  auto c = make_calibrated_codec("tqc2", hb);
  ASSERT_TRUE(c.ok()) << c.error();
  int covered = 0;
  for (int p = 0; p < (*c)->layout().nparts; ++p) covered += (*c)->layout().parts[p].count;
  EXPECT_LE(covered, 48);
  EXPECT_EQ((*c)->row_bytes(), 2u + 128 / 8);
}

TEST(Calibrated, RowSizeIsFixedWhateverTheSpectrum) {
  // Heads of one layer must share a row size: zero-variance groups leave
  // zero bytes, not a shorter row.
  for (int d : {64, 80}) {
    HeadBasis full = synthetic_head_basis(d, 1), sparse = synthetic_head_basis(d, 2);
    for (int i = d / 4; i < d; ++i) sparse.var[i] = 0.0f;
    for (const char* f : {"tqc2", "tqc4", "tqc6"}) {
      auto a = make_calibrated_codec(f, full), b = make_calibrated_codec(f, sparse);
      ASSERT_TRUE(a.ok() && b.ok()) << f;
      const size_t expect = 2 + size_t(std::lround(*calibrated_bits(f, d) * d)) / 8;
      EXPECT_EQ((*a)->row_bytes(), expect) << f << " d=" << d;
      EXPECT_EQ((*b)->row_bytes(), expect) << f << " d=" << d;
      const auto x = draw_rows(sparse, 50, 4);
      EXPECT_LT(rel_mse(**b, x), 0.2) << f;  // the zero-variance part of the basis carries nothing
    }
  }
}

TEST(Calibrated, EightBitsRoundTripsToCodebookError) {
  for (int d : {64, 80, 128}) {
    const HeadBasis hb = synthetic_head_basis(d, d);
    auto c = make_calibrated_codec("tqc8", hb);
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_EQ((*c)->row_bytes(), size_t(2 + d));
    const auto x = draw_rows(hb, 500, 1);
    // Unit-Gaussian 8-bit Lloyd-Max error is ~4e-5 per coordinate.
    EXPECT_LT(rel_mse(**c, x), 2e-4) << d;
  }
}

TEST(Calibrated, BeatsPlainTqOnAnisotropicRows) {
  const int d = 128;
  HeadBasis hb = synthetic_head_basis(d, 17);
  for (int i = 0; i < d; ++i) hb.var[i] = float(std::exp(-8.0 * i / d));  // eigenvalue spread ~3000x
  const auto train = draw_rows(hb, 4000, 2), test = draw_rows(hb, 1000, 3);
  auto fit = fit_head_basis(train.data(), 4000, d);
  ASSERT_TRUE(fit.ok());
  for (int bits : {2, 3, 4}) {
    auto tqc = make_calibrated_codec("tqc" + std::to_string(bits), *fit);
    auto tq = make_codec("tq" + std::to_string(bits), d);
    ASSERT_TRUE(tqc.ok() && tq.ok());
    EXPECT_EQ((*tqc)->row_bytes(), (*tq)->row_bytes());
    const double e_c = rel_mse(**tqc, test, fit->mean.data()), e_t = rel_mse(**tq, test);
    EXPECT_LT(e_c * 2.0, e_t) << bits << " bits: tqc " << e_c << " tq " << e_t;
  }
}

// ttcB: tqcB's basis, whitening and widths with the trellis code: the same
// row size; the decoder equals the state machine over the coded components
// written out here; less error than tqc at 2 and 3 bits on anisotropic rows
// (no component above 4 bits: on spectra steep enough that tqc gives the
// first components 5 or more, ttc can lose); more than 4 bits per coordinate
// is refused by name.
TEST(Calibrated, TrellisOnTheCalibratedCoordinates) {
  const int d = 128;
  HeadBasis hb = synthetic_head_basis(d, 17);
  for (int i = 0; i < d; ++i) hb.var[i] = float(std::exp(-4.0 * i / d));  // a 55x spread (ref-5m's heads: 10-100x)
  const auto train = draw_rows(hb, 4000, 2), test = draw_rows(hb, 600, 3);
  auto fit = fit_head_basis(train.data(), 4000, d);
  ASSERT_TRUE(fit.ok());
  for (const char* b : {"2", "2.5", "3"}) {
    auto ttc = make_calibrated_codec(std::string("ttc") + b, *fit);
    auto tqc = make_calibrated_codec(std::string("tqc") + b, *fit);
    ASSERT_TRUE(ttc.ok() && tqc.ok()) << b << ": " << (ttc.ok() ? tqc.error() : ttc.error());
    EXPECT_EQ((*ttc)->row_bytes(), (*tqc)->row_bytes());
    const double e_t = rel_mse(**ttc, test, fit->mean.data()), e_q = rel_mse(**tqc, test, fit->mean.data());
    EXPECT_LT(e_t, 0.9 * e_q) << b << " bits: ttc " << e_t << " tqc " << e_q;
    // The decoder: the allocation's widths, codes in one stream after the scale.
    auto alloc = calibrated_allocation(std::string("ttc") + b, *fit);
    ASSERT_TRUE(alloc.ok());
    EXPECT_LE(*std::max_element(alloc->bits.begin(), alloc->bits.end()), 4);
    std::vector<float> x(test.begin(), test.begin() + d), got(d), want(d, 0.0f);
    for (int i = 0; i < d; ++i) x[i] -= fit->mean[i];
    std::vector<uint8_t> row((*ttc)->row_bytes());
    ASSERT_TRUE((*ttc)->quantize(x.data(), 1, row.data()).ok());
    (*ttc)->decode_unscaled(row.data(), got.data(), Impl::kRef);
    uint16_t h;
    std::memcpy(&h, row.data(), 2);
    for (int i = 0, s = 0, at = 0; i < d; ++i) {
      const int w = alloc->bits[i];
      if (w == 0) continue;
      int code = 0;
      for (int k = 0; k < w; ++k, ++at) code = code << 1 | ((row[2 + at / 8] >> (at % 8)) & 1);  // MSB first
      s = ((s << w) | code) & (kTrellisStates - 1);
      want[i] = trellis_table(w)[s] * unorm16_to_f32(h);
    }
    for (int i = 0; i < d; ++i) EXPECT_EQ(got[i], want[i]) << b << " i " << i;
  }
  // Row size and the stream for d 64 and 256 (synthetic bases, spectra 1 to 1/16).
  for (int dd : {64, 256}) {
    const HeadBasis sb = synthetic_head_basis(dd, 5);
    auto ttc = make_calibrated_codec("ttc2.5", sb);
    auto tqc = make_calibrated_codec("tqc2.5", sb);
    ASSERT_TRUE(ttc.ok() && tqc.ok()) << dd;
    EXPECT_EQ((*ttc)->row_bytes(), (*tqc)->row_bytes()) << dd;
    const auto rows = draw_rows(sb, 50, 7);
    EXPECT_LT(rel_mse(**ttc, rows, sb.mean.data()), rel_mse(**tqc, rows, sb.mean.data())) << dd;
  }
  auto wide = make_calibrated_codec("ttc4.5", *fit);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().find("at most 4 bits"), std::string::npos) << wide.error();
  EXPECT_FALSE(make_codec("ttc2", d).ok());  // needs a calibration, as tqc
}

TEST(Calibrated, NamesAndBadInput) {
  EXPECT_TRUE(calibrated_bits("tqc3.5", 64).ok());
  EXPECT_TRUE(calibrated_bits("tqc3.125", 64).ok());  // 200 bits = 25 bytes
  EXPECT_FALSE(calibrated_bits("tqc3.3", 64).ok());   // not a multiple of 1/64
  EXPECT_FALSE(calibrated_bits("tqc3.0625", 64).ok());  // 196 bits: not whole bytes
  EXPECT_FALSE(calibrated_bits("tqc4", 4).ok());        // head dim not a multiple of 8
  // Names carry 6 significant digits: at d = 96, 4.25 bits per value is
  // tqc4.08333 = 392 bits.
  EXPECT_EQ(calibrated_format_name(4.25 - 16.0 / 96), "tqc4.08333");
  EXPECT_TRUE(calibrated_bits("tqc4.08333", 96).ok());
  EXPECT_TRUE(make_calibrated_codec("tqc4.08333", synthetic_head_basis(96, 1)).ok());
  EXPECT_FALSE(calibrated_bits("tqc9", 64).ok());
  EXPECT_FALSE(calibrated_bits("tqcx", 64).ok());
  EXPECT_EQ(calibrated_format_name(4.0), "tqc4");
  EXPECT_EQ(calibrated_format_name(2.25), "tqc2.25");
  auto plain = make_codec("tqc4", 128);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.error().find("calibration"), std::string::npos);
  HeadBasis hb = synthetic_head_basis(32, 1);
  hb.basis[5] += 0.1f;  // no longer orthonormal
  auto c = make_calibrated_codec("tqc4", hb);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("orthonormal"), std::string::npos);
}

// Per-head calibrated K and V (or mixed with plain formats) through the fused
// kernel, against float64 attention over the decoded rows.
void check_attention(const std::string& fk, const std::string& fv, int d, int H, int gqa, int n_kv, int n_q,
                     int causal, bool flat = false) {
  SCOPED_TRACE(fk + "/" + fv + " d=" + std::to_string(d) + " H=" + std::to_string(H) + " gqa=" +
               std::to_string(gqa) + " n_kv=" + std::to_string(n_kv) + " n_q=" + std::to_string(n_q));
  const int Hq = H * gqa;
  std::vector<HeadBasis> bases;
  std::vector<std::unique_ptr<Codec>> kc, vc;
  std::vector<const Codec*> kp, vp;
  for (int h = 0; h < H; ++h) {
    bases.push_back(synthetic_head_basis(d, 100 + h));
    if (flat) bases.back().var.assign(d, 1.0f);  // one width everywhere: long runs, read in the widest blocks
    auto make = [&](const std::string& f, uint64_t seed) {
      auto c = is_calibrated_format(f) ? make_calibrated_codec(f, bases[h]) : make_codec(f, d, seed);
      EXPECT_TRUE(c.ok()) << c.error();
      return std::move(*c);
    };
    kc.push_back(make(fk, 1));
    vc.push_back(make(fv, 2));
    kp.push_back(kc.back().get());
    vp.push_back(vc.back().get());
  }
  Rng rng(d * 7 + n_kv);
  std::vector<float> q(size_t(n_q) * Hq * d), mu_k(size_t(H) * d), mu_v(size_t(H) * d);
  for (auto& x : q) x = float(rng.gaussian());
  for (auto& x : mu_k) x = float(rng.gaussian());
  for (auto& x : mu_v) x = float(rng.gaussian());
  const size_t kr = kc[0]->row_bytes(), vr = vc[0]->row_bytes();
  std::vector<uint8_t> kq(size_t(n_kv) * H * kr), vq(size_t(n_kv) * H * vr);
  std::vector<float> K(size_t(n_kv) * H * d), V(K.size());  // decoded, original domain, + mu
  for (int h = 0; h < H; ++h) {
    const auto xk = draw_rows(bases[h], n_kv, 10 + h), xv = draw_rows(bases[h], n_kv, 20 + h);
    for (int t = 0; t < n_kv; ++t) {
      uint8_t* krow = &kq[(size_t(t) * H + h) * kr];
      uint8_t* vrow = &vq[(size_t(t) * H + h) * vr];
      ASSERT_TRUE(kc[h]->quantize(&xk[size_t(t) * d], 1, krow).ok());
      ASSERT_TRUE(vc[h]->quantize(&xv[size_t(t) * d], 1, vrow).ok());
      kc[h]->dequantize(krow, 1, &K[(size_t(t) * H + h) * d], Impl::kRef);
      vc[h]->dequantize(vrow, 1, &V[(size_t(t) * H + h) * d], Impl::kRef);
      for (int i = 0; i < d; ++i) {
        K[(size_t(t) * H + h) * d + i] += mu_k[h * d + i];
        V[(size_t(t) * H + h) * d + i] += mu_v[h * d + i];
      }
    }
  }
  std::vector<float> out(q.size(), -1.0f);
  AttentionArgs a;
  attention_shape(a, q.data(), n_q, Hq, n_kv, H, d);
  a.k = {kp[0], kq.data(), 0, 0, kp.data()};
  a.v = {vp[0], vq.data(), 0, 0, vp.data()};
  a.causal_offset = causal;
  a.mu_k = mu_k.data();
  a.mu_v = mu_v.data();
  a.threads = 2;
  a.out = out.data();
  ASSERT_TRUE(attention(a).ok());
  std::vector<float> ref_out(q.size());
  a.out = ref_out.data();
  ASSERT_TRUE(attention_ref(a).ok());
  const double scale = 1.0 / std::sqrt(double(d));
  for (int i = 0; i < n_q; ++i)
    for (int hq = 0; hq < Hq; ++hq) {
      const int h = hq / gqa;
      const int lim = causal < 0 ? n_kv : std::min(n_kv, causal + i + 1);
      std::vector<double> s(lim), o(d, 0.0);
      double mx = -1e300, sum = 0;
      for (int t = 0; t < lim; ++t) {
        double dot = 0;
        for (int x = 0; x < d; ++x) dot += double(q[(size_t(i) * Hq + hq) * d + x]) * K[(size_t(t) * H + h) * d + x];
        mx = std::max(mx, s[t] = dot * scale);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int t = 0; t < lim; ++t)
        for (int x = 0; x < d; ++x) o[x] += s[t] / sum * V[(size_t(t) * H + h) * d + x];
      double e = 0, er = 0, n = 0;
      for (int x = 0; x < d; ++x) {
        const size_t at = (size_t(i) * Hq + hq) * d + x;
        e += std::pow(out[at] - o[x], 2);
        er += std::pow(out[at] - ref_out[at], 2);
        n += o[x] * o[x];
      }
      EXPECT_LT(std::sqrt(e / std::max(n, 1e-6)), 1e-4) << "query " << i << " head " << hq;
      EXPECT_LT(std::sqrt(er / std::max(n, 1e-6)), 1e-4) << "reference, query " << i << " head " << hq;
    }
}

TEST(Calibrated, AttentionAddsNoErrorBeyondTheCodes) {
  ExactKeys exact_path;  // the f32 path's claim (int8 scoring: score_int8_test.cpp)
  for (const auto& t : simd_targets()) {
    SCOPED_TRACE(t.name);
    simd_force_target(t.bit);
    check_attention("tqc4", "tqc4", 128, 2, 4, 300, 1, -1);
    check_attention("tqc3", "tqc2.5", 64, 2, 1, 1, 1, -1);
    check_attention("tqc2.25", "tqc3.75", 64, 1, 8, 700, 1, -1);
    check_attention("tqc3", "tq4", 128, 2, 2, 200, 5, 195);
    check_attention("f16", "tqc4", 96, 2, 3, 100, 17, 83);
    check_attention("tqc3.5", "tqc8", 80, 3, 2, 150, 1, -1);   // 280 bits: groups of 8 (AVX-512 reads them unfused)
    check_attention("tqc2.1", "q8_0", 80, 2, 1, 90, 1, -1);    // 168 bits, groups of 8
    check_attention("tqc4", "tqc3", 72, 2, 8, 100, 3, 97);     // d 72 < padded 80, rows decoded once for 24 queries
    check_attention("tqc6", "tqc7", 128, 2, 4, 300, 1, -1);    // widths 5 to 8: 64- and 128-entry tables, 8 bits
    check_attention("tqc6.5", "tqc5.5", 64, 2, 2, 150, 3, 147);
    check_attention("tqc6", "tqc7", 128, 2, 4, 120, 1, -1, true);  // 6 and 7 bits in blocks of 8 sub-chunks
    check_attention("tqc8", "tqc5", 128, 2, 2, 90, 1, -1, true);   // 8 bits in blocks of 4
    check_attention("tqc7", "tqc6", 256, 1, 3, 60, 2, 58, true);
    check_attention("ttc2", "ttc3", 64, 2, 4, 120, 1, -1);  // through the codec (no fast reader)
    check_attention("ttc2.5", "tqc2", 128, 2, 2, 60, 3, 57);
  }
  simd_force_target(0);
}

}  // namespace
}  // namespace tkv
