// Throughput of 512-bit vpdpwssd / vpdpbusd / vpermw / vpermb / vpaddd / vfmadd231ps, alone and mixed, in
// cycles of a dependent vpaddd chain (RESULTS §35). Build:
//   g++ -O3 -funroll-all-loops -std=c++20 scripts/harness/ports.cpp -o /tmp/ports
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx512vbmi")
#include <immintrin.h>
#include <algorithm>
#include <cstdio>
#include <ctime>
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
constexpr long long N = 200000000LL;

// Seconds per instruction over 8 independent chains x[k] = op(k, x[k]),
// the chains kept in registers by an empty asm that "changes" them all.
// (A local copy, so that the chains stay in registers across the loop.)
template <class V, class Op>
__attribute__((always_inline)) inline double chains(V* x, Op op) {
  V r[8];
  for (int k = 0; k < 8; ++k) r[k] = x[k];
  const double t0 = cpu();
  for (long long i = 0; i < N / 8; ++i) {
    for (int k = 0; k < 8; ++k) r[k] = op(k, r[k]);
    __asm__ volatile("" : "+v"(r[0]), "+v"(r[1]), "+v"(r[2]), "+v"(r[3]), "+v"(r[4]), "+v"(r[5]), "+v"(r[6]), "+v"(r[7]));
  }
  const double t = (cpu() - t0) / N;
  for (int k = 0; k < 8; ++k) x[k] = r[k];
  return t;
}

int main() {
  __m512i a[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_set1_epi32(i + 1);
  const __m512i b = _mm512_set1_epi32(3), c = _mm512_set1_epi32(5);
  __m512 f[8];  // (normal floats: x * 1 + 0 never reaches a denormal)
  for (int k = 0; k < 8; ++k) f[k] = _mm512_set1_ps(1.0f + k);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  double best[9];
  std::fill(best, best + 9, 1e9);
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = cpu();
    __m512i x = a[0];
    for (long long i = 0; i < N; ++i) {
      x = _mm512_add_epi32(x, b);
      __asm__ volatile("" : "+v"(x));
    }
    best[0] = std::min(best[0], (cpu() - t0) / N);
    a[0] = x;
    const double t[8] = {
        chains(a, [&](int, __m512i v) { return _mm512_dpwssd_epi32(v, b, c); }),
        chains(a, [&](int, __m512i v) { return _mm512_dpbusd_epi32(v, b, c); }),
        chains(a, [&](int, __m512i v) { return _mm512_permutexvar_epi16(v, b); }),
        chains(a, [&](int, __m512i v) { return _mm512_permutexvar_epi8(v, b); }),
        chains(a, [&](int k, __m512i v) { return k < 4 ? _mm512_dpwssd_epi32(v, b, c) : _mm512_permutexvar_epi16(v, b); }),
        chains(a, [&](int k, __m512i v) { return k < 4 ? _mm512_dpwssd_epi32(v, b, c) : _mm512_add_epi32(v, b); }),
        chains(a, [&](int, __m512i v) { return _mm512_add_epi32(v, b); }),
        chains(f, [&](int, __m512 v) { return _mm512_fmadd_ps(v, one, zero); })};
    for (int i = 0; i < 8; ++i) best[i + 1] = std::min(best[i + 1], t[i]);
  }
  int s = 0;
  for (int k = 0; k < 8; ++k) s += _mm512_reduce_add_epi32(_mm512_add_epi32(a[k], _mm512_castps_si512(f[k])));
  const double cyc = best[0];
  std::printf("clock %.2f GHz; cycles per instruction (independent, 8 chains): vpdpwssd %.2f, vpdpbusd %.2f, vpermw "
              "%.2f, vpermb %.2f; 4 vpdpwssd + 4 vpermw %.2f, 4 vpdpwssd + 4 vpaddd %.2f; vpaddd %.2f, vfmadd %.2f "
              "(%d)\n",
              1e-9 / cyc, best[1] / cyc, best[2] / cyc, best[3] / cyc, best[4] / cyc, best[5] / cyc, best[6] / cyc,
              best[7] / cyc, best[8] / cyc, s & 1);
}
