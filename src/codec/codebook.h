// Lloyd-Max scalar codebooks for the coordinates of a randomly rotated unit
// vector (DESIGN.md 1.2). For dimension d each coordinate follows
//   f_d(t) = Γ(d/2) / (√π Γ((d-1)/2)) · (1 - t²)^((d-3)/2),  t in [-1, 1];
// the Gaussian-limit variant uses N(0, 1/d) instead (with d = 1: unit Gaussian).
// Codebooks are computed at first use (exact Gauss-Legendre integration, Lloyd
// iteration to |Δc| < 1e-12) and cached for the life of the process.
#pragma once
#include <vector>

namespace tkv {

enum class Density { kSphere, kGaussian };

struct Codebook {
  int d = 0;
  int bits = 0;
  Density density = Density::kSphere;
  std::vector<double> centroids;   // 2^bits, ascending, symmetric about 0
  std::vector<double> boundaries;  // 2^bits - 1 midpoints, ascending
  std::vector<float> centroids_f;  // float copies used by the kernels
  std::vector<float> boundaries_f;
  double mse_coord = 0;            // E[(t - Q(t))²] for one coordinate
  int iterations = 0;              // Lloyd iterations used
  // Expected E||u - û||² for a unit vector of dimension d (= d · mse_coord).
  double mse_vector() const { return d * mse_coord; }
};

// Cached, thread-safe. d in [2, 65536] (Gaussian: [1, 65536]), bits in [1, 8]; other values throw
// std::invalid_argument (callers validate user input before reaching here).
const Codebook& lloyd_max(int d, int bits, Density density = Density::kSphere);

// Density value and the normalisation constant, exposed for tests.
double sphere_coord_density(int d, double t);
// E|t| under f_d, in closed form: C_d / (α + 1) with α = (d-3)/2.
double sphere_coord_abs_mean(int d);

// Moments ∫ t^k f(t) dt over [a, b], k = 0, 1, 2, by composite Gauss-Legendre.
struct CellMoments { double m0, m1, m2; };
CellMoments density_moments(int d, Density density, double a, double b);

}  // namespace tkv
