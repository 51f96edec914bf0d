#include "codec/eigen.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tkv {

SymEigen sym_eigen(const std::vector<double>& a_in, int n) {
  const size_t N = static_cast<size_t>(n);
  std::vector<double> a = a_in;
  std::vector<double> v(N * N, 0.0);  // columns are eigenvectors as they converge
  for (size_t i = 0; i < N; ++i) v[i * N + i] = 1.0;
  auto A = [&](size_t i, size_t j) -> double& { return a[i * N + j]; };
  double total = 0;
  for (double x : a) total += x * x;
  // Cyclic sweeps until the off-diagonal mass is negligible against the whole.
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (size_t i = 0; i < N; ++i)
      for (size_t j = i + 1; j < N; ++j) off += A(i, j) * A(i, j);
    if (off <= 1e-30 * total || off == 0.0) break;
    for (size_t p = 0; p < N; ++p)
      for (size_t q = p + 1; q < N; ++q) {
        const double apq = A(p, q);
        if (std::fabs(apq) < 1e-300) continue;
        // Rotation angle that zeroes a_pq (Golub & Van Loan, symmetric Schur).
        const double theta = (A(q, q) - A(p, p)) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (size_t k = 0; k < N; ++k) {  // columns p, q
          const double akp = A(k, p), akq = A(k, q);
          A(k, p) = c * akp - s * akq;
          A(k, q) = s * akp + c * akq;
        }
        for (size_t k = 0; k < N; ++k) {  // rows p, q
          const double apk = A(p, k), aqk = A(q, k);
          A(p, k) = c * apk - s * aqk;
          A(q, k) = s * apk + c * aqk;
        }
        for (size_t k = 0; k < N; ++k) {
          const double vkp = v[k * N + p], vkq = v[k * N + q];
          v[k * N + p] = c * vkp - s * vkq;
          v[k * N + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return A(x, x) > A(y, y); });
  SymEigen e;
  e.values.resize(N);
  e.vectors.resize(N * N);
  for (size_t r = 0; r < N; ++r) {
    const size_t col = static_cast<size_t>(order[r]);
    e.values[r] = A(col, col);
    size_t big = 0;
    for (size_t k = 1; k < N; ++k)
      if (std::fabs(v[k * N + col]) > std::fabs(v[big * N + col]) + 1e-12) big = k;
    const double sign = v[big * N + col] < 0 ? -1.0 : 1.0;
    for (size_t k = 0; k < N; ++k) e.vectors[r * N + k] = sign * v[k * N + col];
  }
  return e;
}

}  // namespace tkv
