// Prototype: tq2 keys scored by pair tables (two 2-bit codes = one nibble = one vpshufb index), the
// row-major codes transposed per block of 32 rows in registers (no stored layout change). Against the
// tree's AVX2 kernel (int8_dots_ordered), and the table's added score error over the codec's.
//   g++ -O2 -std=c++20 scripts/harness/lut2_avx2.cpp -o /tmp/lut2 -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "attention/score_int8.h"
#include "codec/format.h"
#include "codec/kernels.h"
#include "codec/rotation.h"

using namespace tkv;
using namespace tkv::attn;

static double cpu() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// Pair tables of one query (natural order q, dp coordinates): for pair P (coordinates 2P, 2P+1),
// entry a | b << 2 = round((q_2P c_a + q_2P+1 c_b) / s) + 128, s = max |entry| / 127. 32 bytes a
// pair (the 16 entries in both lanes). Returns s.
static float make_pairs(const float* q, int dp, const float* c, uint8_t* lut) {
  float m = 0;
  const float cm = std::max(std::fabs(c[0]), std::fabs(c[3]));
  for (int P = 0; P < dp / 2; ++P) m = std::max(m, (std::fabs(q[2 * P]) + std::fabs(q[2 * P + 1])) * cm);
  const float s = m > 0 ? m / 127.0f : 1.0f;
  for (int P = 0; P < dp / 2; ++P)
    for (int k = 0; k < 16; ++k) {
      const float e = q[2 * P] * c[k & 3] + q[2 * P + 1] * c[k >> 2];
      const int v = std::clamp(static_cast<int>(std::nearbyint(e / s)), -127, 127) + 128;
      lut[32 * P + k] = lut[32 * P + 16 + k] = static_cast<uint8_t>(v);
    }
  return s;
}

// Spec: dots[j][t] = Σ_P lut[j][P][nibble P of row t], nibble P = bits 4P.. of the plane bytes.
static void pairs_ref(const uint8_t* const* rows, size_t o0, int dp, const uint8_t* lut, int G, int32_t* dots) {
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < 32; ++t) {
      int32_t s = 0;
      for (int P = 0; P < dp / 2; ++P) {
        const uint8_t b = rows[t][o0 + P / 2];
        s += lut[(static_cast<size_t>(j) * dp / 2 + P) * 32 + ((b >> (4 * (P & 1))) & 15)];
      }
      dots[j * 32 + t] = s;
    }
}

// 32 rows' plane bytes (dp/4 each) transposed: T[b][t] = byte b of row t. 16 bytes of 16 rows at a
// time per lane (lane 1: rows 16-31), 4 rounds of unpack(X_i, X_i+8) (each rotates the 8-bit index
// (row, byte) by one).
__attribute__((target("avx2"))) static void transpose32(const uint8_t* const* rows, size_t o0, int nbytes,
                                                        uint8_t* T) {
  for (int m = 0; m < nbytes; m += 16) {
    __m256i x[16], y[16];
    for (int r = 0; r < 16; ++r)
      x[r] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(rows[r + 16] + o0 + m),
                                 reinterpret_cast<const __m128i*>(rows[r] + o0 + m));
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < 8; ++i) {
        y[2 * i] = _mm256_unpacklo_epi8(x[i], x[i + 8]);
        y[2 * i + 1] = _mm256_unpackhi_epi8(x[i], x[i + 8]);
      }
      for (int i = 0; i < 8; ++i) {
        x[2 * i] = _mm256_unpacklo_epi8(y[i], y[i + 8]);
        x[2 * i + 1] = _mm256_unpackhi_epi8(y[i], y[i + 8]);
      }
    }
    for (int k = 0; k < 16; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(T + 32 * (m + k)), x[k]);
  }
}

// Butterfly variant: rounds 1-3 (epi8, epi16, epi32) within groups of 8 rows, round 4 (epi64)
// across them: at most 16 vectors live.
__attribute__((target("avx2"))) static void transpose32b(const uint8_t* const* rows, size_t o0, int nbytes,
                                                         uint8_t* T) {
  static const int col_of[8] = {0, 8, 4, 12, 2, 10, 6, 14};  // c_j's first column
  for (int m = 0; m < nbytes; m += 16) {
    __m256i c[2][8];
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
      __m256i x[8], a[8], b[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r)
        x[r] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(rows[8 * g + r + 16] + o0 + m),
                                   reinterpret_cast<const __m128i*>(rows[8 * g + r] + o0 + m));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        a[2 * i] = _mm256_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
      }
#pragma GCC unroll 4
      for (int jj = 0; jj < 4; ++jj) {
        const int j = (jj & 1) + 4 * (jj >> 1);
        b[j] = _mm256_unpacklo_epi16(a[j], a[j + 2]);
        b[j + 2] = _mm256_unpackhi_epi16(a[j], a[j + 2]);
      }
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        c[g][j] = _mm256_unpacklo_epi32(b[j], b[j + 4]);
        c[g][j + 4] = _mm256_unpackhi_epi32(b[j], b[j + 4]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(T + 32 * (m + col_of[j])), _mm256_unpacklo_epi64(c[0][j], c[1][j]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(T + 32 * (m + col_of[j] + 1)), _mm256_unpackhi_epi64(c[0][j], c[1][j]));
    }
  }
}

// G = 4 queries, one block of 32 rows: the spec's integers.
__attribute__((target("avx2"))) static void pairs_avx2(const uint8_t* T, int dp, const uint8_t* lut, int32_t* dots) {
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i A[4], B[4];
  for (int j = 0; j < 4; ++j) A[j] = B[j] = _mm256_setzero_si256();
  const size_t ld = static_cast<size_t>(dp) / 2 * 32;
  for (int b = 0; b < dp / 4; ++b) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(T + 32 * b));
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256i* t = reinterpret_cast<const __m256i*>(lut + j * ld + 64 * b);
      const __m256i x0 = _mm256_shuffle_epi8(_mm256_load_si256(t), lo);
      const __m256i x1 = _mm256_shuffle_epi8(_mm256_load_si256(t + 1), hi);
      A[j] = _mm256_add_epi16(A[j], _mm256_add_epi16(x0, x1));
      B[j] = _mm256_add_epi16(B[j], _mm256_add_epi16(_mm256_srli_epi16(x0, 8), _mm256_srli_epi16(x1, 8)));
    }
  }
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
  for (int j = 0; j < 4; ++j) {
    const __m256i even = _mm256_sub_epi16(A[j], _mm256_slli_epi16(B[j], 8));
    const __m256i t0 = _mm256_and_si256(even, lo16), t1 = _mm256_and_si256(B[j], lo16);
    const __m256i t2 = _mm256_srli_epi32(even, 16), t3 = _mm256_srli_epi32(B[j], 16);
    const __m256i a = _mm256_unpacklo_epi32(t0, t1), b = _mm256_unpackhi_epi32(t0, t1);
    const __m256i c = _mm256_unpacklo_epi32(t2, t3), dd = _mm256_unpackhi_epi32(t2, t3);
    const __m256i r0 = _mm256_unpacklo_epi64(a, c), r1 = _mm256_unpackhi_epi64(a, c);
    const __m256i r2 = _mm256_unpacklo_epi64(b, dd), r3 = _mm256_unpackhi_epi64(b, dd);
    int32_t* o = dots + 32 * j;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 8), _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 24), _mm256_permute2x128_si256(r2, r3, 0x31));
  }
}

int main(int argc, char** argv) {
  const size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  const int G = 4;
  if (!int8_set_target(Int8Target::kAvx2)) return 1;
  std::mt19937 rng(7);
  std::normal_distribution<float> N(0, 1);
  for (int d : {64, 128, 256}) {
    auto cx = make_codec("tq2", d);
    const Codec& C = **cx;
    const RowLayout& L = C.layout();
    const size_t o0 = L.parts[0].planes[0].offset;
    const float* cen = L.parts[0].centroids;
    std::vector<float> x(rows * d), q(G * d), rq(G * d);
    for (auto& v : x) v = N(rng);
    for (auto& v : q) v = N(rng);
    std::vector<uint8_t> K(rows * C.row_bytes());
    if (!C.quantize(x.data(), rows, K.data()).ok()) return 1;
    for (int j = 0; j < G; ++j) C.rotation()->forward(q.data() + j * d, rq.data() + j * d);
    Int8Keys k;
    int8_keys_prepare(L, d, d, nullptr, k);
    std::vector<int8_t> q8n(G * d), q8(G * d);
    for (int j = 0; j < G; ++j) {
      int32_t b;
      int8_quantize_query_ref(rq.data() + j * d, d, q8n.data() + j * d, &b);
    }
    std::vector<int> order(d);
    int8_query_order(k, order.data());
    for (int j = 0; j < G; ++j)
      for (int p = 0; p < d; ++p) q8[j * d + p] = q8n[j * d + order[p]];
    std::vector<const uint8_t*> rp(rows);
    for (size_t t = 0; t < rows; ++t) rp[t] = K.data() + t * C.row_bytes();
    alignas(32) static uint8_t lut[4 * 512 * 32];
    float sc[4];
    for (int j = 0; j < G; ++j) sc[j] = make_pairs(rq.data() + j * d, d, cen, lut + j * d / 2 * 32);
    alignas(32) static uint8_t T[256 * 32];
    std::vector<int32_t> ref(G * 32), got(G * 32), dots(G * 32);
    // Accuracy of the table against exact <q', c>, over the codec's own error (rows' originals rotated).
    double codec = 0, tab = 0;
    std::vector<float> u(d), rx(d);
    for (size_t b0 = 0; b0 + 32 <= rows; b0 += 32) {
      pairs_ref(rp.data() + b0, o0, d, lut, G, ref.data());
      transpose32b(rp.data() + b0, o0, d / 4, T);
      pairs_avx2(T, d, lut, got.data());
      if (ref != got) { std::fprintf(stderr, "d %d: kernel differs from its spec at block %zu\n", d, b0 / 32); return 1; }
      for (int t = 0; t < 32; ++t) {
        C.decode_rotated(rp[b0 + t], u.data());
        C.rotation()->forward(x.data() + (b0 + t) * d, rx.data());
        // s_t: the decoded row over its centroids.
        double num = 0, den = 0;
        std::vector<uint8_t> codes(d, 0);
        unpack_plane_or(rp[b0 + t] + o0, d, 2, 0, codes.data());
        for (int i = 0; i < d; ++i) num += double(u[i]) * cen[codes[i]], den += double(cen[codes[i]]) * cen[codes[i]];
        const double s = num / den;
        for (int j = 0; j < G; ++j) {
          double ex = 0, tr = 0;
          for (int i = 0; i < d; ++i) ex += double(rq[j * d + i]) * cen[codes[i]], tr += double(rq[j * d + i]) * rx[i];
          const double lu = (ref[j * 32 + t] - 128.0 * d / 2) * sc[j];
          codec += (tr - s * ex) * (tr - s * ex);
          tab += s * s * (ex - lu) * (ex - lu);
        }
      }
    }
    double tree = 1e9, fs = 1e9, tr_only = 1e9;
    const int reps = std::max(3, int(2e6 / rows));
    volatile int32_t sink = 0;
    for (int round = 0; round < 7; ++round) {
      double t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (size_t b0 = 0; b0 + 32 <= rows; b0 += 32) {
          int8_dots_ordered(k, L, rp.data() + b0, 32, q8.data(), G, dots.data(), 32);
          sink = sink + dots[0];
        }
      tree = std::min(tree, (cpu() - t0) / reps / rows);
      t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (size_t b0 = 0; b0 + 32 <= rows; b0 += 32) {
          transpose32b(rp.data() + b0, o0, d / 4, T);
          pairs_avx2(T, d, lut, dots.data());
          sink = sink + dots[0];
        }
      fs = std::min(fs, (cpu() - t0) / reps / rows);
      t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (size_t b0 = 0; b0 + 32 <= rows; b0 += 32) {
          transpose32b(rp.data() + b0, o0, d / 4, T);
          sink = sink + T[5];
        }
      tr_only = std::min(tr_only, (cpu() - t0) / reps / rows);
    }
    std::printf("tq2 d %d, %zu rows, G 4: tree %.2f ns a row, pair tables %.2f (transpose %.2f): %.2fx; "
                "table's added score-error variance over the codec's %.4f\n",
                d, rows, tree * 1e9, fs * 1e9, tr_only * 1e9, tree / fs, tab / codec);
  }
}
