// Symmetric eigen-decomposition (cyclic Jacobi in float64), used to fit the
// calibrated basis of a head (eigenvectors of the centred covariance).
#pragma once
#include <vector>

namespace tkv {

struct SymEigen {
  std::vector<double> values;   // n, descending
  std::vector<double> vectors;  // n x n row-major: row i is the unit eigenvector of values[i]
};

// a: n x n symmetric, row-major. Deterministic: eigenvectors are signed so
// that their largest-magnitude entry is positive (first one on ties).
SymEigen sym_eigen(const std::vector<double>& a, int n);

}  // namespace tkv
