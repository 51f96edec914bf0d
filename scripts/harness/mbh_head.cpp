// Attention microbenchmark, head-major (RESULTS §35): ns per (row, KV head) of one decode step at n tokens,
// 1 thread, CPU time, best of 7, for each format named. Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/mbh_head.cpp -o /tmp/mbh_head -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
// Usage: /tmp/mbh_head N FORMAT...   (e.g. 65536 f16 tq4 tq3 tq2)
// H=1 in the environment: one KV head (4 query heads) instead of 8 (a cache
// that fits in L2 at a few thousand tokens); T=2: two threads, wall time
// instead of the thread's CPU time (RESULTS §51).
#include <ctime>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention/attention.h"
#include "util/huge_buffer.h"
using namespace tkv;
static const int kThreads = getenv("T") ? atoi(getenv("T")) : 1;
static double cpu() { timespec t; clock_gettime(kThreads > 1 ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(int argc, char** argv) {
  int n = atoi(argv[1]);
  const int d = 128, H = getenv("H") ? atoi(getenv("H")) : 8, Q = 4 * H;
  std::mt19937 rng(1); std::normal_distribution<float> N(0, 1);
  std::vector<float> x(size_t(n) * H * d); for (auto& v : x) v = N(rng);
  std::vector<float> y(x.size()); for (auto& v : y) v = N(rng);
  std::vector<float> q(Q * d), out(Q * d); for (auto& v : q) v = N(rng);
  for (int a = 2; a < argc; ++a) {
    const char* fmt = argv[a];
    auto c = make_codec(fmt, d); const Codec& C = **c;
    const size_t rb = C.row_bytes();
    HugeBuffer K(size_t(n) * H * rb + 64), V(K.size());
    (void)C.quantize(x.data(), size_t(n) * H, K.data());  // treated as [H][n]: rows are random anyway
    (void)C.quantize(y.data(), size_t(n) * H, V.data());
    AttentionArgs at; at.q = q.data(); at.n_q = 1; at.n_q_heads = Q; at.n_kv = n; at.n_kv_heads = H; at.d = d;
    at.k = {&C, K.data(), rb, size_t(n) * rb, nullptr}; at.v = {&C, V.data(), rb, size_t(n) * rb, nullptr};
    at.out = out.data(); at.threads = kThreads; at.keys = KeyScoring::kInt8;
    (void)attention(at);
    int reps = std::max(3, int(1e6 / n));
    double best = 1e9;
    for (int t = 0; t < 7; ++t) { double t0 = cpu(); for (int r = 0; r < reps; ++r) (void)attention(at); best = std::min(best, (cpu() - t0) / reps); }
    printf("%s %.2f\n", fmt, best * 1e9 / n / H);
  }
}
