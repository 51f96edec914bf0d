// Formats: SIMD == scalar reference byte for byte on every SIMD target,
// round trips, MSE against the Lloyd-Max optimum, edge cases and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <cstring>

#include "codec/codebook.h"
#include "codec/format.h"
#include "codec/kernels.h"
#include "util/rng.h"
#include "util/simd_targets.h"
#include "simd_guard.h"

namespace tkv {
namespace {


std::vector<float> random_rows(Rng& rng, int n, int d, double scale = 1.0) {
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (auto& v : x) v = static_cast<float>(rng.gaussian() * scale);
  return x;
}

std::vector<std::string> every_format() {
  std::vector<std::string> f = all_format_names();
  for (const char* extra : {"tq1.5", "tq5.5", "tq6.5", "tq7.5", "tq2.5-nc", "tq8-nc"}) f.push_back(extra);
  return f;
}

TEST(Formats, SimdWritesSameBytesAsReferenceOnEveryTarget) {
  TargetGuard guard;
  Rng rng(1);
  // The target named as the one running is a generated one: the best by
  // default, the forced one otherwise.
  ASSERT_FALSE(simd_targets().empty());
  EXPECT_EQ(simd_current_target(), simd_targets().front().name);
  for (const auto& t : simd_targets()) {
    simd_force_target(t.bit);
    EXPECT_EQ(simd_current_target(), t.name);
    for (int d : {8, 16, 24, 64, 80, 96, 112, 128, 160, 256, 576}) {
      auto x = random_rows(rng, 7, d, 3.0);
      x[0] = 0.0f;  // a zero element in an otherwise random row
      for (const auto& name : every_format()) {
        auto c = make_codec(name, d);
        ASSERT_TRUE(c.ok()) << c.error();
        const size_t rb = (*c)->row_bytes();
        std::vector<uint8_t> a(7 * rb), b(7 * rb);
        ASSERT_TRUE((*c)->quantize(x.data(), 7, a.data(), Impl::kSimd).ok());
        ASSERT_TRUE((*c)->quantize(x.data(), 7, b.data(), Impl::kRef).ok());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << name << " d=" << d << " target " << t.name;
        std::vector<float> da(7 * d), db(7 * d);
        (*c)->dequantize(a.data(), 7, da.data(), Impl::kSimd);
        (*c)->dequantize(a.data(), 7, db.data(), Impl::kRef);
        ASSERT_EQ(0, std::memcmp(da.data(), db.data(), da.size() * 4)) << name << " d=" << d << " " << t.name;
      }
    }
  }
}

TEST(Formats, TurboMseWithinTwoPercentOfLloydMaxForEveryDim) {
  Rng rng(2);
  for (int d : kDims) {
    const int n = std::max(200, 200000 / d);
    auto x = random_rows(rng, n, d);
    for (int b = 1; b <= 8; ++b) {
      auto c = make_codec("tq" + std::to_string(b), d);
      ASSERT_TRUE(c.ok());
      std::vector<uint8_t> q(n * (*c)->row_bytes());
      ASSERT_TRUE((*c)->quantize(x.data(), n, q.data()).ok());
      std::vector<float> y(x.size());
      (*c)->dequantize(q.data(), n, y.data());
      double err = 0;
      for (int r = 0; r < n; ++r) {
        double nn = 0, e = 0;
        for (int i = 0; i < d; ++i) nn += double(x[r * d + i]) * x[r * d + i];
        for (int i = 0; i < d; ++i) e += std::pow(double(x[r * d + i]) - y[r * d + i], 2);
        err += e / nn;
      }
      err /= n;
      const double opt = lloyd_max(d, b).mse_vector();
      // Monte-Carlo noise: relative sd of the mean ~ sqrt(2/(n d)) (chi-square-like).
      const double tol = 0.02 + 3 * std::sqrt(2.0 / (double(n) * d)) + (b >= 7 ? 0.02 : 0.0);
      EXPECT_NEAR(err / opt, 1.0, tol) << "tq" << b << " d=" << d;
    }
  }
}

}  // namespace
}  // namespace tkv

namespace tkv {
namespace {

// What the norm suffixes promise (docs/FORMATS.md §4): -nc stores the scale
// that makes the decoded row's norm equal the input's, -ip the one that makes
// the decoded row's component along the input equal the input (<x̂, x> =
// ||x||²). Both hold to the rounding of the stored e6m10 scale (half an ulp:
// 2^-11 relative). Plain tq rows miss both by far more, so neither property
// holds by accident.
TEST(Formats, NormCorrectionKeepsTheNormAndIpKeepsTheComponentAlongX) {
  Rng rng(20261201);
  const double scale_rounding = std::ldexp(1.0, -11) + 2e-6;
  for (int d : {64, 80, 128})
    for (int bits : {2, 3, 4}) {
      SCOPED_TRACE("d=" + std::to_string(d) + " bits=" + std::to_string(bits));
      const int n = 200;
      std::vector<float> x(size_t(n) * d);
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < d; ++i)  // rows of mixed scale, some with an outlier channel
          x[size_t(r) * d + i] = static_cast<float>(rng.gaussian() * (1 + r % 5) * (i == r % d && r % 3 == 0 ? 8 : 1));
      double plain_norm_dev = 0, plain_ip_dev = 0;
      for (const char* suffix : {"", "-nc", "-ip"}) {
        auto c = make_codec("tq" + std::to_string(bits) + suffix, d);
        ASSERT_TRUE(c.ok()) << c.error();
        std::vector<uint8_t> q(size_t(n) * (*c)->row_bytes());
        ASSERT_TRUE((*c)->quantize(x.data(), n, q.data()).ok());
        std::vector<float> y(x.size());
        (*c)->dequantize(q.data(), n, y.data());
        double max_norm_dev = 0, max_ip_dev = 0;
        for (int r = 0; r < n; ++r) {
          double xx = 0, yy = 0, xy = 0;
          for (int i = 0; i < d; ++i) {
            const double a = x[size_t(r) * d + i], b = y[size_t(r) * d + i];
            xx += a * a;
            yy += b * b;
            xy += a * b;
          }
          max_norm_dev = std::max(max_norm_dev, std::fabs(std::sqrt(yy / xx) - 1.0));
          max_ip_dev = std::max(max_ip_dev, std::fabs(xy / xx - 1.0));
        }
        if (std::string(suffix).empty()) {
          plain_norm_dev = max_norm_dev;
          plain_ip_dev = max_ip_dev;
        } else if (std::string(suffix) == "-nc") {
          EXPECT_LE(max_norm_dev, scale_rounding);
        } else {
          EXPECT_LE(max_ip_dev, scale_rounding);
        }
      }
      EXPECT_GT(plain_norm_dev, 20 * scale_rounding);
      EXPECT_GT(plain_ip_dev, 20 * scale_rounding);
    }
}

}  // namespace
}  // namespace tkv
