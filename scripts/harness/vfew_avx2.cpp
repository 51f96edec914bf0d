// V kernel calls on few rows (RESULTS §41), ns a call; build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/vfew_avx2.cpp -o /tmp/vfew -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// int8_values_ordered on n rows (G 4, d 128, tq3 and tq2): ns a call, best of 7.
#include "attention/score_int8.h"
#include "codec/format.h"
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  const int d = 128, G = 4;
  for (const char* f : {"tq3", "tq2"}) {
    auto c = make_codec(f, d); const Codec& C = **c;
    std::mt19937 rng(1); std::normal_distribution<float> N(0, 1);
    std::vector<float> x(32 * d); for (auto& v : x) v = N(rng);
    std::vector<uint8_t> rows(32 * C.row_bytes() + 64); (void)C.quantize(x.data(), 32, rows.data());
    std::vector<const uint8_t*> p(32); for (int r = 0; r < 32; ++r) p[r] = rows.data() + r * C.row_bytes();
    attn::Int8Keys k; attn::int8_keys_prepare(C.layout(), d, d, C.coord_scale(), k, attn::kInt8Residual, true, attn::Int8Side::kValues);
    std::vector<float> w(G * 32, 0.5f), acc(G * d, 0.0f);
    for (int n : {1, 2, 3, 4, 8, 32}) {
      double best = 1e9;
      for (int rep = 0; rep < 7; ++rep) {
        double t0 = cpu();
        for (int i = 0; i < 200000; ++i) attn::int8_values_ordered(k, C.layout(), p.data(), n, w.data(), G, 32, acc.data());
        best = std::min(best, (cpu() - t0) / 200000 * 1e9);
      }
      printf("%s n=%d: %.1f ns a call\n", f, n, best);
    }
  }
}
