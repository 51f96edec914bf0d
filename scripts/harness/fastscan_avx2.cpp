// The coordinate-major K layout measured on an AVX2 CPU (RESULTS §38): Faiss-style fast-scan
// key scores (a vpshufb looks up one coordinate's q'_i·c_j table for 32 tokens) against the tree's
// AVX2 integer kernel (int8_dots_ordered: centroid words by vpshufb, vpmaddwd with the query words), both
// on the same tq rows, G = 4 queries a KV head, blocks of 32 tokens; and the table's added score
// error against the codec's own and the tree's int8 path's. Build after the Release build:
//   g++ -O2 -std=c++20 -mavx2 -mfma scripts/harness/fastscan_avx2.cpp -o /tmp/fastscan -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// Usage: /tmp/fastscan [ROWS]   (default 4096: K rows in cache, the kernels alone)
//
// Layout (per block of 32 tokens, 4-bit containers for 2-4 bit codes): blk[p][t] =
// code(t, 2p) | code(t, 2p+1) << 4, 64 x 32 bytes at d 128. Tables: lut[j][i][k] =
// round(q'_ji · c_k / qsL) + 128 (u8), qsL = f · max_i |q'_ji| · max_k |c_k| / 127 (f = 1, or fitted
// per query to the codes' frequencies with clamping at ±127). Sums: each lookup's 32 bytes added as
// 16 words to A and shifted right by 8 to B (Faiss's even/odd split): token 2w = A_w − 256·B_w,
// token 2w+1 = B_w, exact because 128 lookups of at most 255 stay below 2^16.
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

// A row's codes in natural order (the codec's own unpacking).
static void row_codes(const RowLayout& L, const uint8_t* row, uint8_t* codes) {
  std::memset(codes, 0, static_cast<size_t>(L.d));
  for (int p = 0; p < L.nparts; ++p)
    for (int pl = 0; pl < L.parts[p].nplanes; ++pl)
      unpack_plane_or(row + L.parts[p].planes[pl].offset, L.parts[p].count, L.parts[p].planes[pl].width,
                      L.parts[p].planes[pl].shift, codes + L.parts[p].begin);
}

// Tables of one query: lut[i * 16 + k] = round(q_i c_k / qsL) + 128, clamped; returns qsL.
static float make_lut(const float* q, int d, const float* c, int nc, const double* freq, bool fit, uint8_t* lut) {
  float qm = 0, cm = 0;
  for (int i = 0; i < d; ++i) qm = std::max(qm, std::fabs(q[i]));
  for (int k = 0; k < nc; ++k) cm = std::max(cm, std::fabs(c[k]));
  const float top = qm * cm / 127.0f;
  float best = top;
  if (fit) {  // the scale with the least expected squared table error, codes at their frequencies
    double bestE = 1e300;
    for (int s = 40; s <= 100; ++s) {
      const float qs = top * static_cast<float>(s) / 100.0f;
      double e = 0;
      for (int i = 0; i < d; ++i)
        for (int k = 0; k < nc; ++k) {
          const float v = q[i] * c[k], r = std::clamp(std::nearbyint(v / qs), -127.0f, 127.0f) * qs;
          e += freq[k] * (v - r) * (v - r);
        }
      if (e < bestE) bestE = e, best = qs;
    }
  }
  for (int i = 0; i < d; ++i)
    for (int k = 0; k < 16; ++k) {
      const float v = k < nc ? std::clamp(std::nearbyint(q[i] * c[k] / best), -127.0f, 127.0f) : 0.0f;
      lut[i * 16 + k] = static_cast<uint8_t>(static_cast<int>(v) + 128);
    }
  return best;
}

// Scalar specification: dots[j][t] = Σ_i lut[j][i][code] − 128 d.
static void fastscan_ref(const uint8_t* blk, int d, const uint8_t* lut, int G, int32_t* dots) {
  for (int j = 0; j < G; ++j)
    for (int t = 0; t < 32; ++t) {
      int32_t s = 0;
      for (int p = 0; p < d / 2; ++p) {
        const uint8_t b = blk[p * 32 + t];
        s += lut[(static_cast<size_t>(j) * d + 2 * p) * 16 + (b & 15)] + lut[(static_cast<size_t>(j) * d + 2 * p + 1) * 16 + (b >> 4)];
      }
      dots[j * 32 + t] = s - 128 * d;
    }
}

// The AVX2 kernel, G = 4, one block: the specification's integers.
__attribute__((target("avx2"))) static void fastscan_avx2(const uint8_t* blk, int d, const uint8_t* lut, int32_t* dots) {
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i A[4], B[4];
  for (int j = 0; j < 4; ++j) A[j] = B[j] = _mm256_setzero_si256();
  const size_t ld = static_cast<size_t>(d) * 16;
  for (int p = 0; p < d / 2; ++p) {
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + 32 * p));
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    for (int j = 0; j < 4; ++j) {
      const uint8_t* t = lut + j * ld + 32 * p;
      const __m256i x0 = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t))), lo);
      const __m256i x1 = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t + 16))), hi);
      A[j] = _mm256_add_epi16(A[j], _mm256_add_epi16(x0, x1));  // wraps: recovered below
      B[j] = _mm256_add_epi16(B[j], _mm256_add_epi16(_mm256_srli_epi16(x0, 8), _mm256_srli_epi16(x1, 8)));
    }
  }
  const __m256i bias = _mm256_set1_epi32(128 * d), lo16 = _mm256_set1_epi32(0xFFFF);
  for (int j = 0; j < 4; ++j) {
    // Word w of a 128-bit lane: token 2w of the lane as A − 256 B (mod 2^16), token 2w + 1 as B. So
    // dword m holds tokens 4m (low word of `even`), 4m + 2 (its high word), 4m + 1 and 4m + 3 (B's).
    const __m256i even = _mm256_sub_epi16(A[j], _mm256_slli_epi16(B[j], 8));
    const __m256i t0 = _mm256_sub_epi32(_mm256_and_si256(even, lo16), bias);
    const __m256i t1 = _mm256_sub_epi32(_mm256_and_si256(B[j], lo16), bias);
    const __m256i t2 = _mm256_sub_epi32(_mm256_srli_epi32(even, 16), bias);
    const __m256i t3 = _mm256_sub_epi32(_mm256_srli_epi32(B[j], 16), bias);
    const __m256i a = _mm256_unpacklo_epi32(t0, t1), b = _mm256_unpackhi_epi32(t0, t1);   // 0 1 4 5, 8 9 12 13
    const __m256i c = _mm256_unpacklo_epi32(t2, t3), dd = _mm256_unpackhi_epi32(t2, t3);  // 2 3 6 7, 10 11 14 15
    const __m256i r0 = _mm256_unpacklo_epi64(a, c), r1 = _mm256_unpackhi_epi64(a, c);
    const __m256i r2 = _mm256_unpacklo_epi64(b, dd), r3 = _mm256_unpackhi_epi64(b, dd);
    // r0: tokens 0-3 | 16-19, r1: 4-7 | 20-23, r2: 8-11 | 24-27, r3: 12-15 | 28-31.
    int32_t* o = dots + 32 * j;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 8), _mm256_permute2x128_si256(r2, r3, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 24), _mm256_permute2x128_si256(r2, r3, 0x31));
  }
}

struct Err {
  double codec = 0, int8 = 0, lut = 0, lutfit = 0;
  long n = 0;
};

// Score errors of n rows (xs: originals) against `queries` (original domain), d = codec's.
static void errors(const Codec& C, const std::vector<float>& xs, size_t n, const std::vector<float>& queries, int nq,
                   Err& e) {
  const int d = C.dim();
  const RowLayout& L = C.layout();
  const RowLayout::Part& P = L.parts[0];
  const int nc = 1 << P.bits;
  std::vector<uint8_t> K(n * C.row_bytes());
  if (!C.quantize(xs.data(), n, K.data()).ok()) std::abort();
  Int8Keys k;
  int8_keys_prepare(L, d, d, nullptr, k);
  std::vector<uint8_t> codes(n * d);
  std::vector<double> freq(nc, 0.0);
  for (size_t t = 0; t < n; ++t) {
    row_codes(L, K.data() + t * C.row_bytes(), codes.data() + t * d);
    for (int i = 0; i < d; ++i) freq[codes[t * d + i]] += 1.0;
  }
  std::vector<float> u(d), rq(d);
  std::vector<int8_t> q8(d);
  std::vector<uint8_t> lut(static_cast<size_t>(d) * 16), lutf(lut.size());
  std::vector<double> s(n);
  std::vector<std::vector<float>> rxs(n, std::vector<float>(d));
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* row = K.data() + t * C.row_bytes();
    C.decode_rotated(row, u.data());
    // The decoder gives s_t · c(code): the row scale, and a check that the codes read here are its codes.
    double a = 0, b = 0;
    for (int i = 0; i < d; ++i) a += double(u[i]) * P.centroids[codes[t * d + i]], b += double(P.centroids[codes[t * d + i]]) * P.centroids[codes[t * d + i]];
    s[t] = a / b;
    for (int i = 0; i < d; ++i)
      if (std::fabs(u[i] - s[t] * P.centroids[codes[t * d + i]]) > 1e-5 * (std::fabs(u[i]) + 1e-3)) {
        std::fprintf(stderr, "code mismatch\n");
        std::exit(1);
      }
    C.rotation()->forward(xs.data() + t * d, rxs[t].data());
  }
  for (int j = 0; j < nq; ++j) {
    C.rotation()->forward(queries.data() + static_cast<size_t>(j) * d, rq.data());
    int32_t bias;
    const float qs = int8_quantize_query_ref(rq.data(), d, q8.data(), &bias);
    const float qL = make_lut(rq.data(), d, P.centroids, nc, freq.data(), false, lut.data());
    const float qF = make_lut(rq.data(), d, P.centroids, nc, freq.data(), true, lutf.data());
    for (size_t t = 0; t < n; ++t) {
      const uint8_t* cd = codes.data() + t * d;
      double exact = 0, truth = 0, i8 = 0, lu = 0, lf = 0;
      for (int i = 0; i < d; ++i) {
        exact += double(rq[i]) * P.centroids[cd[i]];
        truth += double(rq[i]) * rxs[t][i];
        i8 += double(q8[i]) * k.table[0][cd[i]];
        lu += lut[i * 16 + cd[i]] - 128;
        lf += lutf[i * 16 + cd[i]] - 128;
      }
      i8 = (i8 - bias) * qs * k.cs;
      e.codec += std::pow(truth - s[t] * exact, 2);
      e.int8 += std::pow(s[t] * (exact - i8), 2);
      e.lut += std::pow(s[t] * (exact - lu * qL), 2);
      e.lutfit += std::pow(s[t] * (exact - lf * qF), 2);
      ++e.n;
    }
  }
}

static void print_err(const char* what, const char* fmt, const Err& e) {
  std::printf("%-22s %-5s added score-error variance over the codec's: int8 path %.4f, table (max scale) %.4f, "
              "table (fitted scale) %.4f\n", what, fmt, e.int8 / e.codec, e.lut / e.codec, e.lutfit / e.codec);
}

int main(int argc, char** argv) {
  const size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  const int d = 128, G = 4;
  if (!int8_set_target(Int8Target::kAvx2)) { std::fprintf(stderr, "no AVX2\n"); return 1; }
  std::mt19937 rng(7);
  std::normal_distribution<float> N(0, 1);
  const char* fmts[] = {"tq2", "tq3", "tq4"};
  // Accuracy: synthetic Gaussian rows and queries (d 128), and Qwen3.5's keys (d 256; every 12th key a query).
  for (const char* f : fmts) {
    auto c = make_codec(f, d);
    std::vector<float> x(2048 * d), q(16 * d);
    for (auto& v : x) v = N(rng);
    for (auto& v : q) v = N(rng);
    Err e;
    errors(**c, x, 2048, q, 16, e);
    print_err("synthetic d128", f, e);
  }
  for (int layer : {3, 7}) {
    char path[256];
    std::snprintf(path, sizeof path, "../shared/data/kv/qwen3.5-0.8b/layer%d_keys.bin", layer);
    FILE* fp = std::fopen(path, "rb");
    if (!fp) { std::fprintf(stderr, "no %s\n", path); continue; }
    uint32_t h[5];
    if (std::fread(h, 4, 5, fp) != 5) return 1;
    std::vector<float> all(size_t(h[2]) * h[3] * h[4]);
    if (std::fread(all.data(), 4, all.size(), fp) != all.size()) return 1;
    std::fclose(fp);
    for (const char* f : fmts) {
      auto c = make_codec(f, static_cast<int>(h[4]));
      Err e;
      for (uint32_t head = 0; head < h[2]; ++head) {
        std::vector<float> x(all.begin() + size_t(head) * h[3] * h[4], all.begin() + size_t(head + 1) * h[3] * h[4]);
        std::vector<float> q;
        for (uint32_t t = 5; t < h[3]; t += 12) q.insert(q.end(), x.begin() + size_t(t) * h[4], x.begin() + size_t(t + 1) * h[4]);
        errors(**c, x, h[3], q, static_cast<int>(q.size() / h[4]), e);
      }
      char what[64];
      std::snprintf(what, sizeof what, "Qwen3.5 layer %d d%u", layer, h[4]);
      print_err(what, f, e);
    }
  }
  // Speed: the kernels alone on `rows` rows (blocks of 32), ns a row for 4 queries, best of 7.
  for (const char* f : fmts) {
    auto cx = make_codec(f, d);
    const Codec& C = **cx;
    const RowLayout& L = C.layout();
    const int nc = 1 << L.parts[0].bits;
    std::vector<float> x(rows * d), q(G * d), rq(G * d);
    for (auto& v : x) v = N(rng);
    for (auto& v : q) v = N(rng);
    std::vector<uint8_t> K(rows * C.row_bytes());
    if (!C.quantize(x.data(), rows, K.data()).ok()) return 1;
    for (int j = 0; j < G; ++j) C.rotation()->forward(q.data() + j * d, rq.data() + j * d);
    // The tree's kernel.
    Int8Keys k;
    int8_keys_prepare(L, d, d, nullptr, k);
    std::vector<int8_t> q8n(G * d), q8(G * d);
    for (int j = 0; j < G; ++j) {
      int32_t b;
      int8_quantize_query_ref(rq.data() + j * d, d, q8n.data() + j * d, &b);
    }
    // The query in the kernel's order, once (as attention does): int8_dots_ordered.
    std::vector<int> order(d);
    int8_query_order(k, order.data());
    for (int j = 0; j < G; ++j)
      for (int p = 0; p < d; ++p) q8[j * d + p] = q8n[j * d + order[p]];
    std::vector<const uint8_t*> rp(rows);
    for (size_t t = 0; t < rows; ++t) rp[t] = K.data() + t * C.row_bytes();
    std::vector<int32_t> dots(G * 32);
    // Coordinate-major blocks.
    const size_t nb = rows / 32;
    std::vector<uint8_t> blkv(nb * 32 * d / 2 + 64);
    uint8_t* blk = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(blkv.data()) + 63) & ~uintptr_t(63));
    std::vector<uint8_t> codes(d);
    for (size_t t = 0; t < nb * 32; ++t) {
      row_codes(L, rp[t], codes.data());
      for (int p = 0; p < d / 2; ++p)
        blk[(t / 32) * 32 * d / 2 + p * 32 + t % 32] = static_cast<uint8_t>(codes[2 * p] | codes[2 * p + 1] << 4);
    }
    alignas(32) static uint8_t lut[4 * 1024 * 16];
    std::vector<double> freq(nc, 1.0);
    for (int j = 0; j < G; ++j) make_lut(rq.data() + j * d, d, L.parts[0].centroids, nc, freq.data(), false, lut + j * d * 16);
    // The kernel gives the specification's integers.
    std::vector<int32_t> ref(G * 32), got(G * 32);
    for (size_t b = 0; b < nb; ++b) {
      fastscan_ref(blk + b * 32 * d / 2, d, lut, G, ref.data());
      fastscan_avx2(blk + b * 32 * d / 2, d, lut, got.data());
      if (ref != got) { std::fprintf(stderr, "%s: kernel differs from its specification at block %zu\n", f, b); return 1; }
    }
    double tree = 1e9, fs = 1e9;
    const int reps = std::max(3, int(2e6 / rows));
    volatile int32_t sink = 0;
    for (int round = 0; round < 7; ++round) {
      double t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (size_t b = 0; b < nb; ++b) {
          int8_dots_ordered(k, L, rp.data() + 32 * b, 32, q8.data(), G, dots.data(), 32);
          sink = sink + dots[0];
        }
      tree = std::min(tree, (cpu() - t0) / reps / (nb * 32));
      t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (size_t b = 0; b < nb; ++b) {
          fastscan_avx2(blk + b * 32 * d / 2, d, lut, dots.data());
          sink = sink + dots[0];
        }
      fs = std::min(fs, (cpu() - t0) / reps / (nb * 32));
    }
    std::printf("%s keys, %zu rows, G 4, d 128: tree's AVX2 kernel %.2f ns a row, fast-scan %.2f ns a row (%.2fx); "
                "K bytes a row %zu (tree) / %d (4-bit containers)\n",
                f, rows, tree * 1e9, fs * 1e9, tree / fs, C.row_bytes(), d / 2);
  }
}
