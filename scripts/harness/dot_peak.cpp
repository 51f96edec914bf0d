// Instruction rate of the dot-product instructions on AVX-512 (RESULTS §48):
// 12 independent chains of vfmadd231ps, vpdpwssd and vpdpbusd on zmm, G
// instructions a second. Build: g++ -O2 -march=native scripts/harness/dot_peak.cpp
#include <immintrin.h>
#include <chrono>
#include <cstdio>
static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
// 12 chains a[i] = op(a[i]) for N rounds; prints op's rate and a checksum.
template <class V, class Init, class Op, class Sum>
static void rate(const char* name, Init init, Op op, Sum sum) {
  const long N = 100000000;
#define D(i) V a##i = init(i);
  R12(D)
  const double t0 = now();
  for (long n = 0; n < N; n++) {
#define F(i) a##i = op(a##i);
    R12(F)
    __asm__ volatile("" ::"v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5), "v"(a6), "v"(a7), "v"(a8), "v"(a9),
                     "v"(a10), "v"(a11));
  }
  const double t = now() - t0;
  printf("%-6s %.2f G/s (%g)\n", name, N * 12 / t / 1e9, sum(a0, a11));
}
int main() {
  const __m512 w = _mm512_set1_ps(1.0001f), x = _mm512_set1_ps(0.9999f);
  const __m512i wi = _mm512_set1_epi16(3), xi = _mm512_set1_epi16(5);
  auto fsum = [](__m512 a, __m512 b) { return double(_mm512_reduce_add_ps(_mm512_add_ps(a, b))); };
  auto isum = [](__m512i a, __m512i b) { return double(_mm512_reduce_add_epi32(_mm512_add_epi32(a, b))); };
  auto finit = [](int i) { return _mm512_set1_ps(float(i)); };
  auto iinit = [](int i) { return _mm512_set1_epi32(i); };
  for (int r = 0; r < 3; r++) {
    rate<__m512>("fma", finit, [&](__m512 a) { return _mm512_fmadd_ps(w, x, a); }, fsum);
    rate<__m512i>("dpwssd", iinit, [&](__m512i a) { return _mm512_dpwssd_epi32(a, wi, xi); }, isum);
    rate<__m512i>("dpbusd", iinit, [&](__m512i a) { return _mm512_dpbusd_epi32(a, wi, xi); }, isum);
  }
}
