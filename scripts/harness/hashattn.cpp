// Bit hashes of the integer path's attention outputs (RESULTS §37): 7 tq formats, G 1/4/5, 7 context
// lengths (partial blocks included), decode and prefill, causal and windowed, 1 and 2 threads. Build it
// against two builds of the library and diff the outputs: a change meant to give the same bits must.
//   g++ -O2 -std=c++20 scripts/harness/hashattn.cpp -o /tmp/hash -I build/layers/tkv_attention -I src -I build \
//       -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp && /tmp/hash > /tmp/hash.txt
// (n 1 with a window of 40 and 3 queries is refused by the argument checks: "error" lines, the same in both.)
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention/attention.h"
using namespace tkv;
static uint64_t fnv(const void* p, size_t n, uint64_t h) { auto* b = (const uint8_t*)p; for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 1099511628211ull; } return h; }
int main() {
  const char* fmts[] = {"tq2", "tq3", "tq4", "tq2.5", "tq3.5", "tq4.5", "tq5"};
  const int ns[] = {1, 7, 32, 33, 95, 1000, 4097};
  const int Gs[] = {1, 4, 5};
  int d = 128, H = 2;
  uint64_t total = 1469598103934665603ull;
  for (const char* f : fmts) for (int G : Gs) for (int n : ns) for (int mode = 0; mode < 4; ++mode) {
    auto c = make_codec(f, d); const Codec& C = **c;
    std::mt19937 rng(n * 7 + G); std::normal_distribution<float> N(0, 1);
    size_t rb = C.row_bytes();
    std::vector<float> x(size_t(n) * H * d), y(x.size()); for (auto& v : x) v = N(rng); for (auto& v : y) v = N(rng);
    std::vector<uint8_t> K(size_t(n) * H * rb), V(K.size());
    (void)C.quantize(x.data(), size_t(n) * H, K.data()); (void)C.quantize(y.data(), size_t(n) * H, V.data());
    int nq = mode >= 2 ? 3 : 1;
    std::vector<float> q(size_t(nq) * H * G * d), out(q.size()); for (auto& v : q) v = 2 * N(rng);
    AttentionArgs a; a.q = q.data(); a.n_q = nq; a.n_q_heads = H * G; a.n_kv = n; a.n_kv_heads = H; a.d = d;
    a.k = {&C, K.data(), H * rb, rb, nullptr}; a.v = {&C, V.data(), H * rb, rb, nullptr};
    a.out = out.data(); a.threads = 1 + (mode & 1); a.keys = KeyScoring::kInt8;
    if (mode >= 2) { a.causal_offset = n - nq; a.window = mode == 3 ? 40 : 0; }
    auto st = attention(a);
    if (!st.ok()) { printf("%s G%d n%d m%d: error\n", f, G, n, mode); continue; }
    uint64_t h = fnv(out.data(), out.size() * 4, 1469598103934665603ull);
    printf("%s G%d n%d m%d %016llx\n", f, G, n, mode, (unsigned long long)h);
    total = fnv(&h, 8, total);
  }
  printf("total %016llx\n", (unsigned long long)total);
}
