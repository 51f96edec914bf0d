// Throughput of 512-bit vpdpwssd / vpdpbusd / vpermw / vpermb / vpaddd, alone and mixed, in cycles of a
// dependent vpaddd chain (RESULTS §35). Build: g++ -O3 -funroll-all-loops -std=c++20 scripts/harness/ports.cpp -o /tmp/ports
#include <immintrin.h>
#include <cstdio>
#include <ctime>
#include <algorithm>
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define N 200000000LL
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) int main() {
  __m512i a[8]; for (int i = 0; i < 8; ++i) a[i] = _mm512_set1_epi32(i + 1);
  __m512i b = _mm512_set1_epi32(3), c = _mm512_set1_epi32(5);
  double best[9] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
  for (int rep = 0; rep < 5; ++rep) {
    double t0 = cpu();
    __m512i x = a[0];
    for (long long i = 0; i < N; ++i) { x = _mm512_add_epi32(x, b); __asm__ volatile("" : "+v"(x)); }
    best[0] = std::min(best[0], (cpu() - t0) / N); a[0] = x;
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) { a[k] = _mm512_dpwssd_epi32(a[k], b, c); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[1] = std::min(best[1], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) { a[k] = _mm512_dpbusd_epi32(a[k], b, c); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[2] = std::min(best[2], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) { a[k] = _mm512_permutexvar_epi16(a[k], b); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[3] = std::min(best[3], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) { a[k] = _mm512_permutexvar_epi8(a[k], b); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[4] = std::min(best[4], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 4; ++k) { a[k] = _mm512_dpwssd_epi32(a[k], b, c); a[k + 4] = _mm512_permutexvar_epi16(a[k + 4], b); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[5] = std::min(best[5], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 4; ++k) { a[k] = _mm512_dpwssd_epi32(a[k], b, c); a[k + 4] = _mm512_add_epi32(a[k + 4], b); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[6] = std::min(best[6], (cpu() - t0) / N);
    t0 = cpu();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) { a[k] = _mm512_add_epi32(a[k], b); }
      __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]), "+v"(a[4]), "+v"(a[5]), "+v"(a[6]), "+v"(a[7]));
    }
    best[7] = std::min(best[7], (cpu() - t0) / N);
    t0 = cpu();
    __m512 f[8];
    for (int k = 0; k < 8; ++k) f[k] = _mm512_set1_ps(1.0f + k);
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (long long i = 0; i < N / 8; ++i) {
      for (int k = 0; k < 8; ++k) f[k] = _mm512_fmadd_ps(f[k], one, zero);
      __asm__ volatile("" : "+v"(f[0]), "+v"(f[1]), "+v"(f[2]), "+v"(f[3]), "+v"(f[4]), "+v"(f[5]), "+v"(f[6]), "+v"(f[7]));
    }
    for (int k = 0; k < 8; ++k) a[k] = _mm512_add_epi32(a[k], _mm512_castps_si512(f[k]));
    best[8] = std::min(best[8], (cpu() - t0) / N);
  }
  int s = 0; for (int k = 0; k < 8; ++k) s += _mm512_reduce_add_epi32(a[k]);
  const double cyc = best[0];
  printf("clock %.2f GHz; cycles per instruction (independent, 8 chains): vpdpwssd %.2f, vpdpbusd %.2f, vpermw %.2f, vpermb %.2f; 4 vpdpwssd + 4 vpermw %.2f, 4 vpdpwssd + 4 vpaddd %.2f; vpaddd %.2f, vfmadd %.2f (%d)\n",
         1e-9 / cyc, best[1] / cyc, best[2] / cyc, best[3] / cyc, best[4] / cyc, best[5] / cyc, best[6] / cyc, best[7] / cyc, best[8] / cyc, s & 1);
}
