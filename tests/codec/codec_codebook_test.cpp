// Lloyd-Max codebooks for the rotated-coordinate density f_d (DESIGN.md 1.2).
#include <gtest/gtest.h>

#include <cmath>

#include "codec/codebook.h"
#include "util/rng.h"

namespace tkv {
namespace {

// Exact per-vector distortion for d = 128 quoted in DESIGN.md (exact integration).
constexpr double kMse128[] = {0.3609, 0.1160, 0.03397, 0.00931};

TEST(Codebook, D128MatchesDesignByExactIntegration) {
  for (int b = 1; b <= 4; ++b)
    EXPECT_NEAR(lloyd_max(128, b).mse_vector() / kMse128[b - 1], 1.0, 0.005) << "bits " << b;
}

TEST(Codebook, D128FourBitCentroidsMatchDesign) {
  // DESIGN.md lists the positive 4-bit centroids to 4 decimals; our converged
  // fixed point (conditional means verified below) agrees within 1.3e-4.
  const double expect[] = {0.0113, 0.0341, 0.0577, 0.0827, 0.1102, 0.1417, 0.1807, 0.2376};
  const auto& cb = lloyd_max(128, 4);
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(cb.centroids[8 + j], expect[j], 1.5e-4) << j;
  // The outermost centroid of the circulating wrong table (0.1739) is far off.
  EXPECT_GT(cb.centroids[15], 0.2);
}

// Monte-Carlo: quantize coordinates of uniform random unit vectors.
double monte_carlo_mse(int d, int bits, int n_vectors, uint64_t seed) {
  const auto& cb = lloyd_max(d, bits);
  Rng rng(seed);
  std::vector<double> u(d);
  double total = 0;
  for (int v = 0; v < n_vectors; ++v) {
    double n2 = 0;
    for (auto& x : u) { x = rng.gaussian(); n2 += x * x; }
    const double inv = 1.0 / std::sqrt(n2);
    double e = 0;
    for (double x : u) {
      const double t = x * inv;
      int j = 0;
      while (j < static_cast<int>(cb.boundaries.size()) && cb.boundaries[j] < t) ++j;
      e += (t - cb.centroids[j]) * (t - cb.centroids[j]);
    }
    total += e;
  }
  return total / n_vectors;
}

TEST(Codebook, D128MonteCarloOver200kUnitVectors) {
  for (int b = 1; b <= 4; ++b) {
    const double mc = monte_carlo_mse(128, b, 200000, 100 + b);
    EXPECT_NEAR(mc / kMse128[b - 1], 1.0, 0.005) << "bits " << b;
    EXPECT_NEAR(mc / lloyd_max(128, b).mse_vector(), 1.0, 0.005) << "bits " << b;
  }
}

TEST(Codebook, D64AndD256MonteCarloAgreesWithIntegration) {
  for (int d : {64, 256})
    for (int b = 1; b <= 4; ++b) {
      const double mc = monte_carlo_mse(d, b, 100000, 7 * d + b);
      EXPECT_NEAR(mc / lloyd_max(d, b).mse_vector(), 1.0, 0.01) << "d " << d << " bits " << b;
    }
}

TEST(Codebook, SortedSymmetricAndLloydMaxConditionsHold) {
  for (int d : {8, 13, 64, 80, 128, 256, 576, 1024})
    for (int b = 1; b <= 8; ++b) {
      const auto& cb = lloyd_max(d, b);
      const int L = 1 << b;
      ASSERT_EQ(static_cast<int>(cb.centroids.size()), L);
      for (int j = 0; j + 1 < L; ++j) {
        EXPECT_LT(cb.centroids[j], cb.centroids[j + 1]);
        EXPECT_DOUBLE_EQ(cb.boundaries[j], 0.5 * (cb.centroids[j] + cb.centroids[j + 1]));
      }
      for (int j = 0; j < L; ++j) EXPECT_EQ(cb.centroids[j], -cb.centroids[L - 1 - j]);
      // Each centroid is the conditional mean of its cell (to integration accuracy).
      for (int j = L / 2; j < L; ++j) {
        const double a = cb.boundaries[j - 1], hi = j + 1 < L ? cb.boundaries[j] : 1.0;
        const auto m = density_moments(d, Density::kSphere, a, hi);
        EXPECT_NEAR(m.m1 / m.m0, cb.centroids[j], 1e-10 + 1e-8 * std::fabs(cb.centroids[j]));
      }
    }
}

TEST(Codebook, OneBitCentroidIsMeanAbsoluteCoordinate) {
  for (int d : {8, 64, 128, 256, 1024}) {
    const auto& cb = lloyd_max(d, 1);
    EXPECT_NEAR(cb.centroids[1], sphere_coord_abs_mean(d), 1e-12) << d;
    // Closed form check of the closed form: E|t| ≈ sqrt(2/(π d)) for large d.
    if (d >= 256) {
      EXPECT_NEAR(cb.centroids[1] / std::sqrt(2.0 / (M_PI * d)), 1.0, 0.01);
    }
  }
}

TEST(Codebook, DensityIntegratesToOneWithVarianceOneOverD) {
  for (int d : {8, 64, 128, 1024}) {
    const auto m = density_moments(d, Density::kSphere, -1, 1);
    EXPECT_NEAR(m.m0, 1.0, 1e-11) << d;
    EXPECT_NEAR(m.m2 * d, 1.0, 1e-10) << d;
  }
}

TEST(Codebook, MseFallsWithBitsAndApproachesGaussianLimit) {
  for (int d : {8, 64, 128, 256, 1024})
    for (int b = 1; b < 8; ++b) EXPECT_LT(lloyd_max(d, b + 1).mse_vector(), lloyd_max(d, b).mse_vector());
  // Gaussian-limit values quoted by DESIGN.md for d = 128.
  const double gauss[] = {0.3634, 0.1175, 0.03454, 0.009497};
  for (int b = 1; b <= 4; ++b) {
    EXPECT_NEAR(lloyd_max(128, b, Density::kGaussian).mse_vector() / gauss[b - 1], 1.0, 0.002) << b;
    EXPECT_LT(lloyd_max(128, b).mse_vector(), lloyd_max(128, b, Density::kGaussian).mse_vector());
    // Never below the rate-distortion bound 4^-b.
    EXPECT_GT(lloyd_max(128, b).mse_vector(), std::pow(4.0, -b));
  }
  // The finite-d codebook converges to the Gaussian one as d grows.
  EXPECT_NEAR(lloyd_max(1024, 3).mse_vector() / lloyd_max(1024, 3, Density::kGaussian).mse_vector(), 1.0, 0.003);
}

TEST(Codebook, RejectsUnsupportedParameters) {
  EXPECT_THROW(lloyd_max(128, 0), std::invalid_argument);
  EXPECT_THROW(lloyd_max(128, 9), std::invalid_argument);
  EXPECT_THROW(lloyd_max(1, 4), std::invalid_argument);
}

}  // namespace
}  // namespace tkv
