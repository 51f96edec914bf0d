#include "codec/rotation.h"

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "codec/kernels.h"
#include "util/rng.h"

namespace tkv {

static bool is_pow2(int d) { return d > 0 && (d & (d - 1)) == 0; }

Expected<std::shared_ptr<const Rotation>> Rotation::make(int d, uint64_t seed) {
  if (d < 2 || d > 4096 || (!is_pow2(d) && d > 1024))
    return Status::Error("rotation: head dim " + std::to_string(d) +
                         " is not supported (powers of two up to 4096, other sizes 2 to 1024)");
  static std::mutex mu;
  static std::map<std::pair<int, uint64_t>, std::shared_ptr<const Rotation>> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find({d, seed});
    if (it != cache.end()) return it->second;
  }
  auto r = std::make_shared<Rotation>();
  r->d_ = d;
  r->seed_ = seed;
  r->hadamard_ = is_pow2(d);
  Rng rng(seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(d)));
  if (r->hadamard_) {
    r->scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    r->sign_.resize(d);
    for (int i = 0; i < d; ++i) r->sign_[i] = (rng.next() >> 63) ? -1.0f : 1.0f;
  } else {
    // Modified Gram-Schmidt (twice, for float64 orthogonality) on the columns
    // of a Gaussian matrix G: Q with R's diagonal positive, Haar distributed.
    const size_t n = static_cast<size_t>(d);
    std::vector<double> q(n * n);  // column-major: column j at q[j*n]
    for (auto& v : q) v = rng.gaussian();
    for (size_t j = 0; j < n; ++j) {
      double* cj = &q[j * n];
      for (int pass = 0; pass < 2; ++pass)
        for (size_t k = 0; k < j; ++k) {
          const double* ck = &q[k * n];
          double dot = 0;
          for (size_t i = 0; i < n; ++i) dot += ck[i] * cj[i];
          for (size_t i = 0; i < n; ++i) cj[i] -= dot * ck[i];
        }
      double nrm = 0;
      for (size_t i = 0; i < n; ++i) nrm += cj[i] * cj[i];
      nrm = std::sqrt(nrm);
      for (size_t i = 0; i < n; ++i) cj[i] /= nrm;
    }
    // R = Qᵀ (rows of R are the orthonormal vectors): y_j = <q_j, x>.
    r->r_.resize(n * n);
    r->rt_.resize(n * n);
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(q[j * n + i]);  // R[j][i]
        r->r_[j * n + i] = v;
        r->rt_[i * n + j] = v;
      }
  }
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = cache.emplace(std::make_pair(d, seed), std::move(r));
  return it->second;
}

Expected<std::shared_ptr<const Rotation>> Rotation::from_matrix(int d, const std::vector<float>& m) {
  if (d < 1 || d > 1024) return Status::Error("rotation: head dim " + std::to_string(d) + " outside [1, 1024]");
  const size_t n = static_cast<size_t>(d);
  if (m.size() != n * n) return Status::Error("rotation: matrix has " + std::to_string(m.size()) + " entries, expected " +
                                              std::to_string(n * n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i; j < n; ++j) {
      double dot = 0;
      for (size_t k = 0; k < n; ++k) dot += static_cast<double>(m[i * n + k]) * m[j * n + k];
      if (!(std::fabs(dot - (i == j ? 1.0 : 0.0)) <= 1e-4))
        return Status::Error("rotation: basis is not orthonormal (row " + std::to_string(i) + " . row " +
                             std::to_string(j) + " = " + std::to_string(dot) + ")");
    }
  auto r = std::make_shared<Rotation>();
  r->d_ = d;
  r->seed_ = 0;
  r->hadamard_ = false;
  r->r_ = m;
  r->rt_.resize(n * n);
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < n; ++i) r->rt_[i * n + j] = m[j * n + i];
  return std::shared_ptr<const Rotation>(std::move(r));
}

void Rotation::forward(const float* x, float* y, Impl impl, int n) const {
  if (hadamard_) {
    for (int v = 0; v < n; ++v, x += d_, y += d_) {
      if (impl == Impl::kRef) ref::rht_forward(x, sign_.data(), scale_, y, d_);
      else simd::rht_forward(x, sign_.data(), scale_, y, d_);
    }
  } else {
    if (impl == Impl::kRef) ref::matvec_cols(rt_.data(), x, y, d_, n);
    else simd::matvec_cols(rt_.data(), x, y, d_, n);
  }
}

void Rotation::inverse(const float* y, float* x, Impl impl, int n) const {
  if (hadamard_) {
    for (int v = 0; v < n; ++v, x += d_, y += d_) {
      if (impl == Impl::kRef) ref::rht_inverse(y, sign_.data(), scale_, x, d_);
      else simd::rht_inverse(y, sign_.data(), scale_, x, d_);
    }
  } else {
    // x = Rᵀ y = Σ_j y_j · (row j of R): the rows of R are the columns of Rᵀ.
    if (impl == Impl::kRef) ref::matvec_cols(r_.data(), y, x, d_, n);
    else simd::matvec_cols(r_.data(), y, x, d_, n);
  }
}

double Rotation::entry(int i, int j) const {
  if (!hadamard_) return r_[static_cast<size_t>(i) * d_ + j];
  // (H D)[i][j] = (-1)^popcount(i & j) · sign_j, times 1/√d.
  const int parity = __builtin_popcount(static_cast<unsigned>(i & j)) & 1;
  return (parity ? -1.0 : 1.0) * sign_[j] * static_cast<double>(scale_);
}

}  // namespace tkv
