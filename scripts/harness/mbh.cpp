// Attention microbenchmark used in RESULTS §30 (one thread, CPU time). Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/mbh.cpp -o /tmp/mbh -I build/layers/tkv_attention -I src -I build -Lbuild \
//       -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// ns per (row, kv head) of one decode step at n tokens, 1 thread, CPU time.
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention/attention.h"
#include "util/huge_buffer.h"
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  const char* fmt = argv[1]; int n = atoi(argv[2]); int mode = atoi(argv[3]);
  const int d = 128, H = 8, Q = 32;
  auto c = make_codec(fmt, d); const Codec& C = **c;
  std::mt19937 rng(1); std::normal_distribution<float> N(0, 1);
  std::vector<float> x(size_t(n) * H * d); for (auto& v : x) v = N(rng);
  HugeBuffer K(size_t(n) * H * C.row_bytes() + 64), V(K.size());
  (void)C.quantize(x.data(), size_t(n) * H, K.data());
  for (auto& v : x) v = N(rng);
  (void)C.quantize(x.data(), size_t(n) * H, V.data());
  std::vector<float> q(Q * d), out(Q * d); for (auto& v : q) v = N(rng);
  AttentionArgs a; a.q = q.data(); a.n_q = 1; a.n_q_heads = Q; a.n_kv = n; a.n_kv_heads = H; a.d = d;
  a.k.codec = &C; a.k.data = K.data(); a.v.codec = &C; a.v.data = V.data(); a.out = out.data(); a.threads = 1;
  a.keys = mode ? KeyScoring::kInt8 : KeyScoring::kExact;
  attention(a);
  int reps = std::max(3, int(3e6 / n));
  double best = 1e9;
  for (int t = 0; t < 5; ++t) { double t0 = cpu(); for (int r = 0; r < reps; ++r) attention(a); best = std::min(best, (cpu() - t0) / reps); }
  printf("%s %s n=%d: %.3f ms/step, %.2f ns per row-head\n", fmt, mode ? "int8" : "exact", n, best * 1e3, best * 1e9 / n / H);
}
