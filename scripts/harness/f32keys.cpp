// tq4 keys in f32, fused (RESULTS §35, a feasibility measurement): 4-bit codes -> vpermps on 16 centroids ->
// FMA with 4 queries; ns a row, d 128, in cache, one thread; checked against a double reference.
// Build: g++ -O2 -std=c++20 scripts/harness/f32keys.cpp -o /tmp/f32keys
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <ctime>
#include <random>
#include <vector>
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
// 16 accumulators (4 rows x 4 queries) -> one vector of 16 sums, lane 4r + j
__attribute__((target("avx512f,avx512bw,avx512dq"))) static inline __m512 sum16(const __m512* a) {
  __m512 t[8], v[4];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]), _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
  for (int k = 0; k < 4; ++k)
    v[k] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[2 * k]), _mm512_castps_pd(t[2 * k + 1]))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[2 * k]), _mm512_castps_pd(t[2 * k + 1]))));
  const __m512 w0 = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x88), _mm512_shuffle_f32x4(v[0], v[1], 0xDD));
  const __m512 w1 = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x88), _mm512_shuffle_f32x4(v[2], v[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, 0x88), _mm512_shuffle_f32x4(w0, w1, 0xDD));
}
// rows: 64 bytes of codes each (byte b: coord 2b low nibble, 2b+1 high); qe/qo: queries' even / odd coordinates
__attribute__((target("avx512f,avx512bw,avx512dq"))) void dots(const uint8_t* codes, int n, const float* tab,
                                                                  const float* qe, const float* qo, float* out) {
  const __m512 t = _mm512_loadu_ps(tab);
  for (int r0 = 0; r0 < n; r0 += 4) {
    __m512 a[16];
    for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
    for (int g = 0; g < 4; ++g) {  // 16 bytes a row = 32 coords
      __m512 ce[4], co[4];
      for (int r = 0; r < 4; ++r) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + size_t(r0 + r) * 64 + 16 * g)));
        ce[r] = _mm512_permutexvar_ps(v, t);
        co[r] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t);
      }
      for (int j = 0; j < 4; ++j) {
        const __m512 e = _mm512_loadu_ps(qe + j * 64 + 16 * g), o = _mm512_loadu_ps(qo + j * 64 + 16 * g);
        for (int r = 0; r < 4; ++r) a[4 * r + j] = _mm512_fmadd_ps(co[r], o, _mm512_fmadd_ps(ce[r], e, a[4 * r + j]));
      }
    }
    _mm512_storeu_ps(out + r0 * 4, sum16(a));
  }
}
int main() {
  const int n = 4096;
  std::mt19937 rng(1);
  std::vector<uint8_t> codes(size_t(n) * 64);
  for (auto& c : codes) c = rng() & 255;
  float tab[16];
  for (int i = 0; i < 16; ++i) tab[i] = (i - 7.5f) / 3.0f;
  std::normal_distribution<float> N(0, 1);
  std::vector<float> q(4 * 128), qe(4 * 64), qo(4 * 64), out(size_t(n) * 4);
  for (auto& x : q) x = N(rng);
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 64; ++i) { qe[j * 64 + i] = q[j * 128 + 2 * i]; qo[j * 64 + i] = q[j * 128 + 2 * i + 1]; }
  double best = 1e9;
  for (int rep = 0; rep < 30; ++rep) {
    const double t0 = cpu();
    for (int r0 = 0; r0 < n; r0 += 32) dots(codes.data() + size_t(r0) * 64, 32, tab, qe.data(), qo.data(), out.data() + r0 * 4);
    best = std::min(best, cpu() - t0);
  }
  double maxerr = 0;
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < 4; ++j) {
      double s = 0;
      for (int i = 0; i < 128; ++i) {
        const uint8_t b = codes[size_t(r) * 64 + i / 2];
        s += double(q[j * 128 + i]) * tab[i % 2 ? b >> 4 : b & 15];
      }
      maxerr = std::max(maxerr, std::abs(s - out[size_t(r / 4) * 16 + 4 * (r % 4) + j]));
    }
  printf("f32 keys: %.2f ns/row (G=4, d=128, in cache), max |err| %.2e\n", best / n * 1e9, maxerr);
}
