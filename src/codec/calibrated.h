// Calibrated coding (tqc formats): a per-head basis fitted to real rows.
//   y = P (x - mu)       P: eigenvectors of the centred covariance, rows sorted
//                        by variance (mu is subtracted by the cache / attention);
//   z_i = y_i / sigma_i  each component whitened by its standard deviation;
//   s = RMS of the coded z_i, one 16-bit scale per row (unsigned e6m10);
//   component i coded with a unit-Gaussian Lloyd-Max codebook at b_i bits
//   (0..8), the b_i chosen by greedy marginal-distortion allocation for the
//   budget; codes packed in bit planes per run of equal b_i (no code
//   straddles a byte). Decoding gives y_i = s * sigma_i * c[code_i].
// Attention reads rows with the tq kernels: P is the codec's rotation and
// sigma its coord_scale(), folded into the query and the output.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/format.h"
#include "util/status.h"

namespace tkv {

struct HeadBasis {
  int d = 0;
  std::vector<float> mean;   // d
  std::vector<float> basis;  // d x d row-major; row i = component i (unit vector)
  std::vector<float> var;    // d, descending, >= 0
  double shrink_offdiag = 0;  // fit_head_basis's shrinkage weights (see there)
  double shrink_mean = 0;
};

// Mean, eigenvectors and eigenvalues of the centred covariance of n rows of d
// floats (float64 throughout; deterministic). Fails on n < 2 or non-finite rows.
Expected<HeadBasis> fit_head_basis(const float* x, size_t n, int d);

// A seeded rotation's rows (Rotation::make) with variances decaying from 1 to 1/16, for
// benchmarks and tests that have no real data.
HeadBasis synthetic_head_basis(int d, uint64_t seed);

// Bits per component (0..8) for total_bits over all d, by greedy marginal
// distortion (var_i * (D(b) - D(b+1)), D the unit-Gaussian Lloyd-Max error)
// over groups of `group` consecutive components sharing one width; groups
// whose variance is all zero get nothing (the total may then fall short).
// No group gets more than max_bits (ttc: 4, the trellis tables' widest).
std::vector<int> allocate_bits(const std::vector<float>& var, int total_bits, int group, int max_bits = 8);

// "tqcB": B = coded bits per coordinate (excluding the 16-bit row scale), in
// (0, 8] with B·d a whole number of bytes, d a multiple of 8; "tqc4" has tq4's
// size. Parses B or fails.
bool is_calibrated_format(std::string_view name);
Expected<double> calibrated_bits(std::string_view name, int d);
std::string calibrated_format_name(double bits);

// The widths a calibrated format gives each component of a basis: B·d bits
// allocated in groups of 16 components when d and the bit total allow (so the
// AVX-512 kernels read every run), of 8 otherwise. Fails on a bad name or basis.
struct CalibratedAllocation {
  int total_bits = 0, group = 0;
  std::vector<int> bits;  // d widths, 0..8
};
Expected<CalibratedAllocation> calibrated_allocation(std::string_view name, const HeadBasis& basis);

// The codec of a calibrated format on one head's basis (calibrated_allocation's
// widths); rows are 2 + B·d/8 bytes whatever the allocation.
Expected<std::unique_ptr<Codec>> make_calibrated_codec(std::string_view name, const HeadBasis& basis);

}  // namespace tkv
