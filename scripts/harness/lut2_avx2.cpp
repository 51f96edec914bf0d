// tq2 keys scored by pair tables (Int8Keys::lut, RESULTS §42) against the byte kernel they replace
// (int8_dots_ordered, the query reordered once as attention does), the kernels alone on rows in cache,
// G = 4 queries a KV head, blocks of 32 rows; and the tables' added score error over the codec's (rows'
// originals rotated as attention does). Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/lut2_avx2.cpp -o /tmp/lut2 -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// Usage: /tmp/lut2 [ROWS [G]]   (default 4096 rows, G 4 queries a KV head, at most 4)
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

int main(int argc, char** argv) {
  const size_t rows = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  const int G = argc > 2 ? std::clamp(std::atoi(argv[2]), 1, 4) : 4;
  if (!int8_set_target(Int8Target::kAvx2)) { std::fprintf(stderr, "no AVX2\n"); return 1; }
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
    if (!k.lut) { std::fprintf(stderr, "tq2 d %d: no pair tables\n", d); return 1; }
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
    std::vector<uint8_t> lut(G * int8_lut_bytes(d));
    float sc[4];
    int32_t bias = 0;
    for (int j = 0; j < G; ++j) sc[j] = int8_lut_build(k, rq.data() + j * d, lut.data() + j * int8_lut_bytes(d), &bias);
    std::vector<int32_t> ref(G * 32), got(G * 32), dots(G * 32);
    double codec = 0, tab = 0;
    std::vector<float> u(d), rx(d);
    std::vector<uint8_t> codes(d);
    for (size_t b0 = 0; b0 + 32 <= rows; b0 += 32) {
      int8_lut_dots_ref(k, L, rp.data() + b0, 32, lut.data(), G, ref.data(), 32);
      int8_lut_dots(k, L, rp.data() + b0, 32, lut.data(), G, got.data(), 32);
      if (ref != got) { std::fprintf(stderr, "d %d: kernel differs from its spec at block %zu\n", d, b0 / 32); return 1; }
      for (int t = 0; t < 32; ++t) {
        C.decode_rotated(rp[b0 + t], u.data());
        C.rotation()->forward(x.data() + (b0 + t) * d, rx.data());
        std::fill(codes.begin(), codes.end(), 0);
        unpack_plane_or(rp[b0 + t] + o0, d, 2, 0, codes.data());
        double num = 0, den = 0;  // s_t: the decoded row over its centroids
        for (int i = 0; i < d; ++i) num += double(u[i]) * cen[codes[i]], den += double(cen[codes[i]]) * cen[codes[i]];
        const double s = num / den;
        for (int j = 0; j < G; ++j) {
          double ex = 0, tr = 0;
          for (int i = 0; i < d; ++i) ex += double(rq[j * d + i]) * cen[codes[i]], tr += double(rq[j * d + i]) * rx[i];
          const double lu = double(ref[j * 32 + t] - bias) * sc[j];
          codec += (tr - s * ex) * (tr - s * ex);
          tab += s * s * (ex - lu) * (ex - lu);
        }
      }
    }
    double tree = 1e9, fs = 1e9;
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
          int8_lut_dots(k, L, rp.data() + b0, 32, lut.data(), G, dots.data(), 32);
          sink = sink + dots[0];
        }
      fs = std::min(fs, (cpu() - t0) / reps / rows);
    }
    std::printf("tq2 d %d, %zu rows, G %d: byte kernel %.2f ns a row, pair tables %.2f ns a row (%.2fx); "
                "the tables add %.4f of the codec's score-error variance (predicted %.4f)\n",
                d, rows, G, tree * 1e9, fs * 1e9, tree / fs, tab / codec, k.lut_predicted);
  }
}
