// Seeded random orthogonal transforms R (DESIGN.md 1.1).
//  - d a power of two (>= 2): randomized Hadamard R = H·D/√d, O(d log d).
//  - any other d: a dense Haar-random orthogonal matrix (Gram-Schmidt QR of a
//    seeded Gaussian matrix, positive diagonal), d² per vector, no zero padding.
// The same (d, seed) gives the same bits on every platform: the generator is
// xoshiro256** with a Marsaglia-polar Gaussian, the matrix is built in float64.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "util/status.h"

namespace tkv {

enum class Impl { kSimd, kRef };  // kernel choice: dispatched SIMD or scalar reference

constexpr uint64_t kDefaultSeed = 0x74757262'6f6b7631ull;  // "turbokv1"

class Rotation {
 public:
  // Cached per (d, seed); d in [2, 4096].
  static Expected<std::shared_ptr<const Rotation>> make(int d, uint64_t seed = kDefaultSeed);
  // A given orthonormal matrix R (d x d, row-major; y = R x), e.g. a calibrated
  // basis. Fails unless R Rᵀ = I within 1e-4 per entry. Not cached.
  static Expected<std::shared_ptr<const Rotation>> from_matrix(int d, const std::vector<float>& r_rows);

  int dim() const { return d_; }
  bool hadamard() const { return hadamard_; }
  uint64_t seed() const { return seed_; }
  // y = R x and x = Rᵀ y, for n vectors of d floats one after another
  // (dense matrices are read once for up to 4 of them). x and y must not alias.
  void forward(const float* x, float* y, Impl impl = Impl::kSimd, int n = 1) const;
  void inverse(const float* y, float* x, Impl impl = Impl::kSimd, int n = 1) const;
  // The matrix entry R[i][j] (for tests and tools; O(d) for Hadamard).
  double entry(int i, int j) const;
  // The transform's data, for kernels that cannot call forward()/inverse()
  // (codec/flat_format.h: the CUDA kernels): Hadamard signs and scale, or the
  // dense Rᵀ (column i of R contiguous: forward) and R (inverse), row-major.
  const std::vector<float>& hadamard_signs() const { return sign_; }
  float hadamard_scale() const { return scale_; }
  const std::vector<float>& dense_columns() const { return rt_; }
  const std::vector<float>& dense_rows() const { return r_; }

 private:
  int d_ = 0;
  bool hadamard_ = false;
  uint64_t seed_ = 0;
  float scale_ = 1.0f;
  std::vector<float> sign_;  // Hadamard: D's diagonal
  std::vector<float> rt_;    // dense: Rᵀ row-major (column i of R contiguous)
  std::vector<float> r_;     // dense: R row-major (for the inverse)
};

}  // namespace tkv
