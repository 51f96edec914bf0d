// Attention microbenchmark used in RESULTS §30 (one thread, CPU time). Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/kv.cpp -o /tmp/kv -I build/layers/tkv_attention -I src -I build -Lbuild \
//       -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
#include <ctime>
#include <cstdio>
#include <random>
#include <vector>
#include "attention/score_int8.h"
#include "codec/format.h"
#include "codec/kernels.h"
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  const char* fmt = argv[1]; int d = 128, n = 4096, G = 4, dp = padded(d);
  auto c = make_codec(fmt, d); const Codec& C = **c;
  std::mt19937 rng(1); std::normal_distribution<float> N(0, 1);
  std::vector<float> x(size_t(n) * d); for (auto& v : x) v = N(rng);
  std::vector<uint8_t> K(size_t(n) * C.row_bytes()); (void)C.quantize(x.data(), n, K.data());
  attn::Int8Keys k; attn::int8_keys_prepare(C.layout(), d, dp, nullptr, k);
  std::vector<int8_t> q8(G * dp); for (auto& v : q8) v = int8_t(int(N(rng) * 40) % 127);
  std::vector<int16_t> q16(G * dp); for (auto& v : q16) v = int16_t(int(N(rng) * 1000) % 4000);
  std::vector<const uint8_t*> rows(n); for (int i = 0; i < n; ++i) rows[i] = K.data() + size_t(i) * C.row_bytes();
  std::vector<int32_t> a(G * 32); std::vector<float> w(G * 32), acc(G * dp);
  for (auto& v : w) v = std::exp(-2 * std::abs(N(rng)));
  double bk = 1e9, bv = 1e9;
  for (int rep = 0; rep < 30; ++rep) {
    double t0 = cpu();
    for (int r0 = 0; r0 < n; r0 += 32) {
      if (k.wide) attn::int8_dots16(k, C.layout(), rows.data() + r0, 32, q16.data(), G, a.data(), 32);
      else attn::int8_dots(k, C.layout(), rows.data() + r0, 32, q8.data(), G, a.data(), 32);
    }
    bk = std::min(bk, cpu() - t0);
    t0 = cpu();
    for (int r0 = 0; r0 < n; r0 += 32) attn::int8_values(k, C.layout(), rows.data() + r0, 32, w.data(), G, 32, acc.data());
    bv = std::min(bv, cpu() - t0);
  }
  printf("%s wide=%d: K %.2f ns/row, V %.2f ns/row (G=4, d=128, in cache)\n", fmt, k.wide, bk / n * 1e9, bv / n * 1e9);
}
