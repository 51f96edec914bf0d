// V's pair tables (RESULTS §43) against the quads, alone in L1; build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/vlut_avx2.cpp -o /tmp/vlut -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// tq2: the kernel's largest difference from its specification (1-32 rows), then ns a row (best of
// 7) of int8_values_ordered (quads) and int8_vlut_values_ordered at d 64/128/256, G 1/4, on 32 rows
// a call, and ns a call at d 128 on the 1-8 rows a peaked softmax leaves after ValuesInt8's drop.
#include "attention/score_int8.h"
#include "codec/format.h"
#include <algorithm>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <random>
#include <vector>
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main() {
  for (int d : {64, 128, 256}) {
    auto c = make_codec("tq2", d); const Codec& C = **c;
    std::mt19937 rng(d); std::normal_distribution<float> N(0, 1);
    std::vector<float> x(32 * d); for (auto& v : x) v = N(rng);
    std::vector<uint8_t> rows(32 * C.row_bytes() + 64); (void)C.quantize(x.data(), 32, rows.data());
    std::vector<const uint8_t*> p(32); for (int r = 0; r < 32; ++r) p[r] = rows.data() + r * C.row_bytes();
    attn::Int8Keys k; attn::int8_keys_prepare(C.layout(), d, d, C.coord_scale(), k, attn::kInt8Residual, true, attn::Int8Side::kValues);
    if (!k.vlut) { printf("d %d: no vlut\n", d); continue; }
    std::vector<int> perm(d); attn::int8_values_order(k, perm.data());
    for (int G : {1, 4}) {
      std::vector<float> w(G * 32); std::uniform_real_distribution<float> U(0, 1);
      double worst = 0;
      for (int n : {1, 2, 3, 7, 8, 9, 31, 32}) {
        for (auto& v : w) v = std::exp(-6 * U(rng));
        std::vector<float> fast(G * d, 0.0f), nat(G * d, 0.0f);
        attn::int8_vlut_values_ordered(k, C.layout(), p.data(), n, w.data(), G, 32, fast.data());
        attn::int8_vlut_values_ref(k, C.layout(), p.data(), n, w.data(), G, 32, nat.data());
        for (int j = 0; j < G; ++j) for (int q = 0; q < d; ++q)
          worst = std::max(worst, (double)std::fabs(fast[j * d + q] - nat[j * d + perm[q]]) / (1e-6 + std::fabs(nat[j * d + perm[q]])));
      }
      for (auto& v : w) v = 0.5f + 0.5f * U(rng);
      std::vector<float> acc(G * d, 0.0f);
      // Best of 7, ns a call of n rows: m 0 the quads, 1 the pair tables.
      auto best_ns = [&](int m, int n, int iters) {
        double best = 1e9;
        for (int rep = 0; rep < 7; ++rep) {
          double t0 = cpu();
          for (int i = 0; i < iters; ++i)
            if (m == 0) attn::int8_values_ordered(k, C.layout(), p.data(), n, w.data(), G, 32, acc.data());
            else attn::int8_vlut_values_ordered(k, C.layout(), p.data(), n, w.data(), G, 32, acc.data());
          best = std::min(best, (cpu() - t0) / iters * 1e9);
        }
        return best;
      };
      const double t[2] = {best_ns(0, 32, 20000) / 32, best_ns(1, 32, 20000) / 32};
      printf("d %3d G %d: worst rel diff %.2e; quads %.2f, pair tables %.2f ns a row (%.2fx)\n", d, G, worst, t[0], t[1], t[0] / t[1]);
      if (d != 128) continue;
      for (int n : {1, 2, 4, 8}) {
        const double tn[2] = {best_ns(0, n, 50000), best_ns(1, n, 50000)};
        printf("  n %d: quads %.0f, pair tables %.0f ns a call\n", n, tn[0], tn[1]);
      }
    }
  }
}
