#include "codec/codebook.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

namespace tkv {
namespace {

// 16-point Gauss-Legendre nodes and weights on [-1, 1] (positive half).
constexpr double kGLx[8] = {0.0950125098376374401853193, 0.2816035507792589132304605,
                            0.4580167776572273863424194, 0.6178762444026437484466718,
                            0.7554044083550030338951012, 0.8656312023878317438804679,
                            0.9445750230732325760779884, 0.9894009349916499325961542};
constexpr double kGLw[8] = {0.1894506104550684962853967, 0.1826034150449235888667637,
                            0.1691565193950025381893121, 0.1495959888165767320815017,
                            0.1246289712555338720524763, 0.0951585116824927848099251,
                            0.0622535239386478928628438, 0.0271524594117540948517806};

struct DensityFn {
  Density kind;
  int d;
  double sigma;       // 1/sqrt(d)
  double log_c;       // log normalisation
  double alpha;       // (d-3)/2 for the sphere marginal
  double lo, hi;      // integration support (tails beyond carry < 1e-80 mass)

  DensityFn(int d_, Density k) : kind(k), d(d_) {
    sigma = 1.0 / std::sqrt(static_cast<double>(d));
    if (kind == Density::kSphere) {
      alpha = (d - 3) / 2.0;
      log_c = std::lgamma(d / 2.0) - 0.5 * std::log(M_PI) - std::lgamma((d - 1) / 2.0);
      hi = std::min(1.0, 20.0 * sigma);
    } else {
      alpha = 0;
      log_c = -0.5 * std::log(2 * M_PI) - std::log(sigma);
      hi = 20.0 * sigma;
    }
    lo = -hi;
  }
  double operator()(double t) const {
    if (kind == Density::kSphere) {
      double s = 1.0 - t * t;
      if (s <= 0) return 0;
      return std::exp(log_c + alpha * std::log(s));
    }
    double z = t / sigma;
    return std::exp(log_c - 0.5 * z * z);
  }
};

CellMoments moments(const DensityFn& f, double a, double b) {
  CellMoments m{0, 0, 0};
  a = std::max(a, f.lo);
  b = std::min(b, f.hi);
  if (!(b > a)) return m;
  const double h = 0.25 * f.sigma;  // sub-interval width: the integrand is smooth on this scale
  const int n = std::max(1, static_cast<int>(std::ceil((b - a) / h)));
  const double w = (b - a) / n;
  for (int s = 0; s < n; ++s) {
    const double mid = a + (s + 0.5) * w, half = 0.5 * w;
    for (int i = 0; i < 8; ++i) {
      for (double sgn : {-1.0, 1.0}) {
        const double t = mid + sgn * half * kGLx[i];
        const double fw = f(t) * kGLw[i] * half;
        m.m0 += fw;
        m.m1 += fw * t;
        m.m2 += fw * t * t;
      }
    }
  }
  return m;
}

// Initial centroids at the quantiles of f^(1/3) (the high-resolution optimal
// point density), so Lloyd starts close to the answer.
std::vector<double> compander_init(const DensityFn& f, int levels) {
  const int grid = 1 << 14;
  std::vector<double> cdf(grid + 1, 0.0);
  const double step = (f.hi - f.lo) / grid;
  double prev = std::cbrt(f(f.lo));
  for (int i = 1; i <= grid; ++i) {
    double cur = std::cbrt(f(f.lo + i * step));
    cdf[i] = cdf[i - 1] + 0.5 * (prev + cur) * step;
    prev = cur;
  }
  std::vector<double> c(levels);
  for (int j = 0; j < levels; ++j) {
    double target = (j + 0.5) / levels * cdf[grid];
    int i = static_cast<int>(std::lower_bound(cdf.begin(), cdf.end(), target) - cdf.begin());
    i = std::clamp(i, 1, grid);
    double frac = (target - cdf[i - 1]) / std::max(cdf[i] - cdf[i - 1], 1e-300);
    c[j] = f.lo + (i - 1 + frac) * step;
  }
  return c;
}

std::unique_ptr<Codebook> solve(int d, int bits, Density kind) {
  const DensityFn f(d, kind);
  const int levels = 1 << bits;
  auto cb = std::make_unique<Codebook>();
  cb->d = d;
  cb->bits = bits;
  cb->density = kind;
  std::vector<double> c = compander_init(f, levels);
  std::vector<double> bnd(levels - 1);
  std::vector<CellMoments> cell(levels);
  // Lloyd steps until close, then Newton on F_j(c) = ∫_cell (c_j - t) f dt = 0
  // (a tridiagonal system) for quadratic convergence: plain Lloyd needs ~10^5
  // iterations at 8 bits.
  auto lloyd_step = [&]() {
    for (int j = 0; j + 1 < levels; ++j) bnd[j] = 0.5 * (c[j] + c[j + 1]);
    double delta = 0;
    // Symmetric density: solve the positive half and mirror (exact symmetry).
    for (int j = levels / 2; j < levels; ++j) {
      const double a = bnd[j - 1];
      const double b = (j + 1 < levels) ? bnd[j] : f.hi;
      cell[j] = moments(f, a, b);
      double nc = cell[j].m0 > 0 ? cell[j].m1 / cell[j].m0 : 0.5 * (a + std::min(b, f.hi));
      delta = std::max(delta, std::fabs(nc - c[j]));
      c[j] = nc;
      c[levels - 1 - j] = -nc;
    }
    return delta;
  };
  auto newton_step = [&]() {
    for (int j = 0; j + 1 < levels; ++j) bnd[j] = 0.5 * (c[j] + c[j + 1]);
    std::vector<double> lo(levels, 0), di(levels, 0), up(levels, 0), rhs(levels, 0);
    for (int j = 0; j < levels; ++j) {
      const double a = j == 0 ? f.lo : bnd[j - 1];
      const double b = j + 1 < levels ? bnd[j] : f.hi;
      CellMoments m = moments(f, a, b);
      rhs[j] = -(c[j] * m.m0 - m.m1);
      di[j] = m.m0;
      if (j + 1 < levels) { double g = 0.5 * (c[j] - b) * f(b); di[j] += g; up[j] = g; }
      if (j > 0) { double g = -0.5 * (c[j] - a) * f(a); di[j] += g; lo[j] = g; }
    }
    for (int j = 1; j < levels; ++j) {  // Thomas algorithm
      double w = lo[j] / di[j - 1];
      di[j] -= w * up[j - 1];
      rhs[j] -= w * rhs[j - 1];
    }
    std::vector<double> step(levels);
    step[levels - 1] = rhs[levels - 1] / di[levels - 1];
    for (int j = levels - 2; j >= 0; --j) step[j] = (rhs[j] - up[j] * step[j + 1]) / di[j];
    std::vector<double> nc(levels);
    double delta = 0;
    for (int j = 0; j < levels; ++j) {
      nc[j] = 0.5 * ((c[j] + step[j]) - (c[levels - 1 - j] + step[levels - 1 - j]));
      delta = std::max(delta, std::fabs(nc[j] - c[j]));
    }
    for (int j = 0; j + 1 < levels; ++j)
      if (!(nc[j] < nc[j + 1]) || !std::isfinite(nc[j])) return -1.0;  // rejected
    if (!(nc[0] > f.lo)) return -1.0;
    c = nc;
    return delta;
  };
  int it = 0;
  double delta = 1;
  for (; it < 20 && delta >= 1e-12; ++it) delta = lloyd_step();
  for (int n = 0; n < 50 && delta >= 1e-12; ++n, ++it) {
    double nd = newton_step();
    if (nd < 0) { for (int k = 0; k < 20; ++k, ++it) nd = lloyd_step(); }
    delta = nd;
  }
  for (int k = 0; k < 100000 && delta >= 1e-12; ++k, ++it) delta = lloyd_step();
  // Confirm the fixed point: one more Lloyd step moves nothing.
  delta = lloyd_step();
  ++it;
  for (int j = 0; j + 1 < levels; ++j) bnd[j] = 0.5 * (c[j] + c[j + 1]);
  // Distortion: E[t²] - Σ_j (2 c_j m1_j - c_j² m0_j) over the final cells.
  double total_m2 = 0, gain = 0;
  for (int j = 0; j < levels; ++j) {
    const double a = j == 0 ? f.lo : bnd[j - 1];
    const double b = j + 1 < levels ? bnd[j] : f.hi;
    CellMoments m = moments(f, a, b);
    total_m2 += m.m2;
    gain += 2 * c[j] * m.m1 - c[j] * c[j] * m.m0;
  }
  cb->mse_coord = total_m2 - gain;
  cb->iterations = it;
  cb->centroids = c;
  cb->boundaries = bnd;
  cb->centroids_f.assign(c.begin(), c.end());
  cb->boundaries_f.assign(bnd.begin(), bnd.end());
  return cb;
}

}  // namespace

const Codebook& lloyd_max(int d, int bits, Density density) {
  if (d < (density == Density::kGaussian ? 1 : 2) || d > 65536)
    throw std::invalid_argument("codebook: d must be in [2, 65536] (1 for the Gaussian), got " + std::to_string(d));
  if (bits < 1 || bits > 8) throw std::invalid_argument("codebook: bits must be in [1, 8], got " + std::to_string(bits));
  if (density == Density::kSphere && d < 3) throw std::invalid_argument("codebook: sphere density needs d >= 3");
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, std::unique_ptr<Codebook>> cache;
  const auto key = std::make_tuple(d, bits, static_cast<int>(density));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return *it->second;
  }
  auto cb = solve(d, bits, density);  // outside the lock: may take milliseconds
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache.emplace(key, std::move(cb));
  return *it->second;
}

double sphere_coord_density(int d, double t) { return DensityFn(d, Density::kSphere)(t); }

double sphere_coord_abs_mean(int d) {
  const DensityFn f(d, Density::kSphere);
  return std::exp(f.log_c) / (f.alpha + 1.0);
}

CellMoments density_moments(int d, Density density, double a, double b) {
  return moments(DensityFn(d, density), a, b);
}

}  // namespace tkv
