// V's product loop alone on AVX2 (RESULTS §39): acc[j][i] += Σ_r w8[j][r] · c8[r][i] for 32 rows, d 128,
// 4 queries, every variant checked against the plain sum first. `words`: the tree's words before §39
// (row pairs sign-extended, vpmaddwd); `maddubs x1 / x2`, `16-wide x1 / x2`: vpmaddubsw with 1 or 2 row
// pairs summed on 16 bits, widened by shifts (compiler-scheduled loops); `hand`: 2 pairs, hand-unrolled
// (the form values_bytes took); `hand4`: 4 pairs (needs |c8| <= 16 or 7-bit weights). ns a row, best of 5.
//   g++ -O2 -std=c++20 scripts/harness/vbytes_avx2.cpp -o /tmp/vbytes && /tmp/vbytes
#include <immintrin.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
constexpr int D = 128, R = 32, G = 4;
alignas(32) int8_t c8[R][D];
alignas(32) uint8_t w8[G][R];
alignas(32) int16_t pw[R / 2][D * 2];   // (a) words: pair m, coordinate i: rows 2m, 2m+1 adjacent
alignas(32) int8_t pb[R / 2][D * 2];    // (b) bytes: pair m, coordinate i: rows 2m, 2m+1 adjacent
int32_t ref[G][D];

__attribute__((target("avx2"))) void va(int32_t (*out)[D]) {  // the tree's: vpmaddwd on words
  int32_t wp[G][R / 2];
  for (int j = 0; j < G; ++j) for (int m = 0; m < R / 2; ++m) wp[j][m] = w8[j][2 * m] | w8[j][2 * m + 1] << 16;
  for (int v = 0; v < D / 8; v += 2) {
    __m256i a[4][2];
    for (auto& x : a) x[0] = x[1] = _mm256_setzero_si256();
    for (int m = 0; m < R / 2; ++m) {
      const __m256i p0 = _mm256_load_si256((const __m256i*)(pw[m] + 16 * v)), p1 = _mm256_load_si256((const __m256i*)(pw[m] + 16 * v + 16));
      for (int j = 0; j < 4; ++j) {
        const __m256i wv = _mm256_set1_epi32(wp[j][m]);
        a[j][0] = _mm256_add_epi32(a[j][0], _mm256_madd_epi16(p0, wv));
        a[j][1] = _mm256_add_epi32(a[j][1], _mm256_madd_epi16(p1, wv));
      }
    }
    for (int j = 0; j < 4; ++j) { _mm256_storeu_si256((__m256i*)(out[j] + 8 * v), a[j][0]); _mm256_storeu_si256((__m256i*)(out[j] + 8 * v + 8), a[j][1]); }
  }
}
// (b) vpmaddubsw(w pair, c pair): 16 coordinates a vector; NP pairs summed in int16, then widened by shifts.
template <int NP>
__attribute__((target("avx2"))) void vb(int32_t (*out)[D]) {
  int32_t wp[G][R / 2];
  for (int j = 0; j < G; ++j) for (int m = 0; m < R / 2; ++m) wp[j][m] = int32_t((w8[j][2 * m] | w8[j][2 * m + 1] << 8) * 0x10001u);
  for (int v = 0; v < D / 16; v += 2) {  // 32 coordinates: two vectors of 16
    __m256i a[4][4];
    for (auto& x : a) x[0] = x[1] = x[2] = x[3] = _mm256_setzero_si256();
    for (int m = 0; m < R / 2; m += NP) {
      __m256i s[4][2];
      for (int q = 0; q < NP; ++q) {
        const __m256i p0 = _mm256_load_si256((const __m256i*)(pb[m + q] + 32 * v)), p1 = _mm256_load_si256((const __m256i*)(pb[m + q] + 32 * v + 32));
        for (int j = 0; j < 4; ++j) {
          const __m256i wv = _mm256_set1_epi32(wp[j][m + q]);
          const __m256i x0 = _mm256_maddubs_epi16(wv, p0), x1 = _mm256_maddubs_epi16(wv, p1);
          if (q == 0) s[j][0] = x0, s[j][1] = x1;
          else s[j][0] = _mm256_add_epi16(s[j][0], x0), s[j][1] = _mm256_add_epi16(s[j][1], x1);
        }
      }
      for (int j = 0; j < 4; ++j) {
        a[j][0] = _mm256_add_epi32(a[j][0], _mm256_srai_epi32(_mm256_slli_epi32(s[j][0], 16), 16));
        a[j][1] = _mm256_add_epi32(a[j][1], _mm256_srai_epi32(s[j][0], 16));
        a[j][2] = _mm256_add_epi32(a[j][2], _mm256_srai_epi32(_mm256_slli_epi32(s[j][1], 16), 16));
        a[j][3] = _mm256_add_epi32(a[j][3], _mm256_srai_epi32(s[j][1], 16));
      }
    }
    // even/odd coordinates: a[.][0] holds coordinates 32v/2.. even ones; write back naturally (for the check)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        alignas(32) int32_t e[8], o[8];
        _mm256_store_si256((__m256i*)e, a[j][2 * h]); _mm256_store_si256((__m256i*)o, a[j][2 * h + 1]);
        for (int i = 0; i < 8; ++i) { out[j][16 * (v + h) + 2 * i] = e[i]; out[j][16 * (v + h) + 2 * i + 1] = o[i]; }
      }
  }
}
// (c) as (b) but widened with vpmaddwd against ones pairs? no: vpmaddwd(s, (1,0)) and (0,1) -- two multiplies. Skip.

template <int NP>
__attribute__((target("avx2"))) void vc(int32_t (*out)[D]) {
  int32_t wp[G][R / 2];
  for (int j = 0; j < G; ++j) for (int m = 0; m < R / 2; ++m) wp[j][m] = int32_t((w8[j][2 * m] | w8[j][2 * m + 1] << 8) * 0x10001u);
  for (int v = 0; v < D / 16; ++v) {  // 16 coordinates
    __m256i a[4][2];
    for (auto& x : a) x[0] = x[1] = _mm256_setzero_si256();
    for (int m = 0; m < R / 2; m += NP) {
      __m256i s[4];
      for (int q = 0; q < NP; ++q) {
        const __m256i p0 = _mm256_load_si256((const __m256i*)(pb[m + q] + 32 * v));
        for (int j = 0; j < 4; ++j) {
          const __m256i x0 = _mm256_maddubs_epi16(_mm256_set1_epi32(wp[j][m + q]), p0);
          s[j] = q == 0 ? x0 : _mm256_add_epi16(s[j], x0);
        }
      }
      for (int j = 0; j < 4; ++j) {
        a[j][0] = _mm256_add_epi32(a[j][0], _mm256_srai_epi32(_mm256_slli_epi32(s[j], 16), 16));
        a[j][1] = _mm256_add_epi32(a[j][1], _mm256_srai_epi32(s[j], 16));
      }
    }
    for (int j = 0; j < 4; ++j) {
        alignas(32) int32_t e[8], o[8];
        _mm256_store_si256((__m256i*)e, a[j][0]); _mm256_store_si256((__m256i*)o, a[j][1]);
        for (int i = 0; i < 8; ++i) { out[j][16 * v + 2 * i] = e[i]; out[j][16 * v + 2 * i + 1] = o[i]; }
    }
  }
}

__attribute__((target("avx2"))) void vd(int32_t (*out)[D]) {
  int32_t wp[R / 2][G];
  for (int j = 0; j < G; ++j) for (int m = 0; m < R / 2; ++m) wp[m][j] = int32_t((w8[j][2 * m] | w8[j][2 * m + 1] << 8) * 0x10001u);
  for (int v = 0; v < D / 16; ++v) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int m = 0; m < R / 2; m += 2) {
      const __m256i p = _mm256_load_si256((const __m256i*)(pb[m] + 32 * v));
      const __m256i q = _mm256_load_si256((const __m256i*)(pb[m + 1] + 32 * v));
#define ONE(J, A, B) { const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(wp[m][J]), p), _mm256_maddubs_epi16(_mm256_set1_epi32(wp[m + 1][J]), q)); \
      A = _mm256_add_epi32(A, _mm256_srai_epi32(_mm256_slli_epi32(s, 16), 16)); B = _mm256_add_epi32(B, _mm256_srai_epi32(s, 16)); }
      ONE(0, a0, b0) ONE(1, a1, b1) ONE(2, a2, b2) ONE(3, a3, b3)
    }
    __m256i A[4] = {a0, a1, a2, a3}, B[4] = {b0, b1, b2, b3};
    for (int j = 0; j < 4; ++j) {
        alignas(32) int32_t e[8], o[8];
        _mm256_store_si256((__m256i*)e, A[j]); _mm256_store_si256((__m256i*)o, B[j]);
        for (int i = 0; i < 8; ++i) { out[j][16 * v + 2 * i] = e[i]; out[j][16 * v + 2 * i + 1] = o[i]; }
    }
  }
}

__attribute__((target("avx2"))) void ve(int32_t (*out)[D]) {
  int32_t wp[R / 2][G];
  for (int j = 0; j < G; ++j) for (int m = 0; m < R / 2; ++m) wp[m][j] = int32_t((w8[j][2 * m] | w8[j][2 * m + 1] << 8) * 0x10001u);
  for (int v = 0; v < D / 16; ++v) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int m = 0; m < R / 2; m += 4) {
      const __m256i p = _mm256_load_si256((const __m256i*)(pb[m] + 32 * v));
      const __m256i q = _mm256_load_si256((const __m256i*)(pb[m + 1] + 32 * v));
      const __m256i p2 = _mm256_load_si256((const __m256i*)(pb[m + 2] + 32 * v));
      const __m256i q2 = _mm256_load_si256((const __m256i*)(pb[m + 3] + 32 * v));
#define TWO(J, A, B) { const __m256i s = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(wp[m][J]), p), _mm256_maddubs_epi16(_mm256_set1_epi32(wp[m + 1][J]), q)), \
   _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(wp[m + 2][J]), p2), _mm256_maddubs_epi16(_mm256_set1_epi32(wp[m + 3][J]), q2))); \
      A = _mm256_add_epi32(A, _mm256_srai_epi32(_mm256_slli_epi32(s, 16), 16)); B = _mm256_add_epi32(B, _mm256_srai_epi32(s, 16)); }
      TWO(0, a0, b0) TWO(1, a1, b1) TWO(2, a2, b2) TWO(3, a3, b3)
    }
    __m256i A[4] = {a0, a1, a2, a3}, B[4] = {b0, b1, b2, b3};
    for (int j = 0; j < 4; ++j) {
        alignas(32) int32_t e[8], o[8];
        _mm256_store_si256((__m256i*)e, A[j]); _mm256_store_si256((__m256i*)o, B[j]);
        for (int i = 0; i < 8; ++i) { out[j][16 * v + 2 * i] = e[i]; out[j][16 * v + 2 * i + 1] = o[i]; }
    }
  }
}
int main() {
  std::mt19937 rng(1);
  for (int cm : {64, 32, 16}) {
    for (int r = 0; r < R; ++r) for (int i = 0; i < D; ++i) c8[r][i] = int8_t(int(rng() % (2 * cm + 1)) - cm);
    for (int j = 0; j < G; ++j) for (int r = 0; r < R; ++r) w8[j][r] = uint8_t(rng());
    for (int m = 0; m < R / 2; ++m) for (int i = 0; i < D; ++i) {
      pw[m][2 * i] = c8[2 * m][i]; pw[m][2 * i + 1] = c8[2 * m + 1][i];
      pb[m][2 * i] = c8[2 * m][i]; pb[m][2 * i + 1] = c8[2 * m + 1][i];
    }
    // (a)'s word layout: vector v of 8 dwords holds coordinates 8v..8v+7 as word pairs: pw[m][16v..] ok (coordinate i at 2i)
    for (int j = 0; j < G; ++j) for (int i = 0; i < D; ++i) { int s = 0; for (int r = 0; r < R; ++r) s += w8[j][r] * c8[r][i]; ref[j][i] = s; }
    int32_t out[G][D];
    va(out); if (memcmp(out, ref, sizeof ref)) printf("a wrong\n");
    vb<1>(out); if (memcmp(out, ref, sizeof ref)) printf("b1 wrong cm %d\n", cm);
    ve(out); if (memcmp(out, ref, sizeof ref) && cm <= 16) printf("e wrong\n");
    vd(out); if (memcmp(out, ref, sizeof ref) && cm <= 32) printf("d wrong\n");
    vc<1>(out); if (memcmp(out, ref, sizeof ref)) printf("c1 wrong\n");
    if (cm <= 32) { vc<2>(out); if (memcmp(out, ref, sizeof ref)) printf("c2 wrong\n"); vb<2>(out); if (memcmp(out, ref, sizeof ref)) printf("b2 wrong\n"); }
    double te = 1e9, td = 1e9, ta = 1e9, tb1 = 1e9, tb2 = 1e9, tc1 = 1e9, tc2 = 1e9;
    const int reps = 200000;
    for (int round = 0; round < 5; ++round) {
      double t0 = cpu(); for (int i = 0; i < reps; ++i) { va(out); asm volatile("" ::: "memory"); } ta = std::min(ta, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { vb<1>(out); asm volatile("" ::: "memory"); } tb1 = std::min(tb1, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { vd(out); asm volatile("" ::: "memory"); } td = std::min(td, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { ve(out); asm volatile("" ::: "memory"); } te = std::min(te, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { vb<2>(out); asm volatile("" ::: "memory"); } tb2 = std::min(tb2, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { vc<1>(out); asm volatile("" ::: "memory"); } tc1 = std::min(tc1, cpu() - t0);
      t0 = cpu(); for (int i = 0; i < reps; ++i) { vc<2>(out); asm volatile("" ::: "memory"); } tc2 = std::min(tc2, cpu() - t0);
    }
    printf("cm %d: words %.2f ns/row, maddubs x1 %.2f, x2 %.2f; 16-wide x1 %.2f x2 %.2f; hand %.2f hand4 %.2f\n", cm, ta / reps / R * 1e9, tb1 / reps / R * 1e9, tb2 / reps / R * 1e9, tc1 / reps / R * 1e9, tc2 / reps / R * 1e9, td / reps / R * 1e9, te / reps / R * 1e9);
  }
}
