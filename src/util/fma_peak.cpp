#include "util/fma_peak.h"

#include <algorithm>
#include <chrono>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "util/fma_peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace tkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns FLOPs done; 12 independent chains hide the FMA latency.
double FmaLoop(long iters, float* sink) {
  const hn::ScalableTag<float> df;
  // Distinct starting values, or the compiler merges the identical chains.
  auto a0 = hn::Set(df, 0.10f), a1 = hn::Set(df, 0.11f), a2 = hn::Set(df, 0.12f), a3 = hn::Set(df, 0.13f);
  auto a4 = hn::Set(df, 0.14f), a5 = hn::Set(df, 0.15f), a6 = hn::Set(df, 0.16f), a7 = hn::Set(df, 0.17f);
  auto a8 = hn::Set(df, 0.18f), a9 = hn::Set(df, 0.19f), a10 = hn::Set(df, 0.20f), a11 = hn::Set(df, 0.21f);
  const auto x = hn::Set(df, 0.999f), y = hn::Set(df, 0.001f);
  for (long i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, x, y); a1 = hn::MulAdd(a1, x, y); a2 = hn::MulAdd(a2, x, y);
    a3 = hn::MulAdd(a3, x, y); a4 = hn::MulAdd(a4, x, y); a5 = hn::MulAdd(a5, x, y);
    a6 = hn::MulAdd(a6, x, y); a7 = hn::MulAdd(a7, x, y); a8 = hn::MulAdd(a8, x, y);
    a9 = hn::MulAdd(a9, x, y); a10 = hn::MulAdd(a10, x, y); a11 = hn::MulAdd(a11, x, y);
  }
  auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  s = hn::Add(s, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  *sink = hn::GetLane(s);
  return 2.0 * 12.0 * static_cast<double>(iters) * hn::Lanes(df);
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__)
#include <immintrin.h>
#endif
namespace tkv {
HWY_EXPORT(FmaLoop);

namespace {
#if defined(__x86_64__)
// 12 independent vpdpbusd chains: 64 byte products and sums each, counted
// as 128 operations (like an FMA's 2 per lane).
__attribute__((target("avx2,avx512f,avx512bw,avx512vnni"))) double VnniLoop(long iters, int* sink) {
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  for (long i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) a[k] = _mm512_dpbusd_epi32(a[k], x, y);
  __m512i s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_epi32(s, a[k]);
  *sink = _mm512_reduce_add_epi32(s);
  return 128.0 * 12.0 * static_cast<double>(iters);
}
#endif
}  // namespace

double measure_vnni_gops(int threads) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx512vnni")) return 0;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double ops = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) reduction(+ : ops)
    for (int t = 0; t < threads; ++t) {
      int sink;
      ops += VnniLoop(10'000'000, &sink);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, ops / s / 1e9);
  }
  return best;
#else
  return 0;
#endif
}

double measure_fma_gflops(int threads) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double flops = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) reduction(+ : flops)
    for (int t = 0; t < threads; ++t) {
      float sink;
      flops += HWY_DYNAMIC_DISPATCH(FmaLoop)(20'000'000, &sink);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}
}  // namespace tkv
#endif
