// The integer path's K and V kernels alone, rows in L1 (RESULTS §45): cycles a row (at the clock given,
// default 3.67 GHz) for int8_dots_ordered and int8_values_ordered on 16 calls of B rows (default 32), G queries, best of
// 7 of 2000 repetitions, one thread, CPU time. Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/int8_alone.cpp -o /tmp/int8_alone -I src -I build -Lbuild \
//       -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// Usage: /tmp/int8_alone FORMAT|all D G [GHZ [B]]   (e.g. all 128 4, or all 128 4 3.67 64)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>
#include "attention/score_int8.h"
#include "codec/format.h"
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  const char* which = argc > 1 ? argv[1] : "all";
  const int d = argc > 2 ? atoi(argv[2]) : 128, G = argc > 3 ? atoi(argv[3]) : 4;
  const double ghz = argc > 4 ? atof(argv[4]) : 3.67;
  const int B = argc > 5 ? atoi(argv[5]) : 32, nblk = 16, n = B * nblk;
  std::mt19937 rng(1);
  std::normal_distribution<float> N(0, 1);
  for (const char* fmt : {"tq4", "tq3", "tq2"}) {
    if (strcmp(which, "all") && strcmp(which, fmt)) continue;
    auto c = make_codec(fmt, d);
    const Codec& C = **c;
    const size_t rb = C.row_bytes();
    std::vector<float> x(size_t(n) * d);
    for (auto& v : x) v = N(rng);
    std::vector<uint8_t> K(n * rb + 256);
    (void)C.quantize(x.data(), n, K.data());
    attn::Int8Keys k, kv;
    attn::int8_keys_prepare(C.layout(), d, d, C.coord_scale(), k);
    attn::int8_keys_prepare(C.layout(), d, d, C.coord_scale(), kv, attn::kInt8Residual, true, attn::Int8Side::kValues);
    std::vector<const uint8_t*> rows(n);
    for (int i = 0; i < n; ++i) rows[i] = K.data() + i * rb;
    std::vector<int8_t> q8(size_t(G) * d);
    for (auto& v : q8) v = int8_t(int(rng() % 255) - 127);
    std::vector<int32_t> dots(size_t(G) * B);
    std::vector<float> w(size_t(G) * B), acc(size_t(G) * d);
    for (auto& v : w) v = std::exp(N(rng));
    double bk = 1e9, bv = 1e9;
    const int reps = 2000;
    for (int t = 0; t < 7; ++t) {
      double t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (int b = 0; b < nblk; ++b)
          attn::int8_dots_ordered(k, C.layout(), rows.data() + B * b, B, q8.data(), G, dots.data(), B);
      bk = std::min(bk, (cpu() - t0) / reps / n);
      t0 = cpu();
      for (int r = 0; r < reps; ++r)
        for (int b = 0; b < nblk; ++b)
          attn::int8_values_ordered(kv, C.layout(), rows.data() + B * b, B, w.data(), G, B, acc.data());
      bv = std::min(bv, (cpu() - t0) / reps / n);
    }
    printf("%s d %d G %d: K %.2f ns %.1f cycles a row, V %.2f ns %.1f (ordered K %d, V %d)\n", fmt, d, G, bk * 1e9,
           bk * ghz * 1e9, bv * 1e9, bv * ghz * 1e9, k.lanes_dots, kv.lanes_values);
  }
}
