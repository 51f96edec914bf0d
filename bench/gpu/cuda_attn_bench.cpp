// The CUDA issue's attention figures in one run (scripts/cuda-check.sh builds
// this in the GPU machine's minimal build, where `turbokv bench-attn --device
// cuda`, which prints the same table, needs more libraries than are there):
// decode at 1K..64K context (d 128, 8 KV / 32 query heads) for f16, q8_0,
// tq4, tq3, with each one's share of the measured copy bandwidth and its
// speed against f16 in the same run; a 16K causal prefill (rows quantized on
// the GPU) for tq4 against f16.
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "codec/format.h"
#include "cuda/cuda_backend.h"
#include "util/rng.h"

using namespace tkv;

int main(int argc, char** argv) {
  const double min_s = argc > 1 ? std::atof(argv[1]) : 0.5;
  auto info = cuda::device_info();
  if (!info) { std::fprintf(stderr, "cuda_attn_bench: %s\n", info.error().c_str()); return 1; }
  auto bw = cuda::copy_bandwidth_gbs();
  if (!bw) { std::fprintf(stderr, "cuda_attn_bench: %s\n", bw.error().c_str()); return 1; }
  std::printf("%s, %d SMs; device-to-device copy %.1f GB/s (read + write)\n", info->name.c_str(), info->sm_count, *bw);
  const int d = 128, H = 8, Hq = 32, max_ctx = 65536;
  Rng rng(1);
  std::vector<float> kf(size_t(max_ctx) * H * d), vf(kf.size());
  for (float& e : kf) e = static_cast<float>(rng.gaussian());
  for (float& e : vf) e = static_cast<float>(rng.gaussian());
  std::printf("%-6s %-8s %7s %12s %10s %9s %7s %8s\n", "format", "mode", "ctx", "tokens/s", "ms", "GB/s", "bw %", "vs f16");
  std::map<std::string, double> f16;
  for (const char* fmt : {"f16", "q8_0", "tq4", "tq3"}) {
    auto codec = std::move(*make_codec(fmt, d));
    const size_t rb = codec->row_bytes();
    std::vector<uint8_t> k(size_t(max_ctx) * H * rb), v(k.size());
    if (!cuda::quantize(*codec, kf.data(), size_t(max_ctx) * H, k.data()).ok() ||
        !cuda::quantize(*codec, vf.data(), size_t(max_ctx) * H, v.data()).ok()) {
      std::fprintf(stderr, "cuda_attn_bench: quantize %s failed\n", fmt);
      return 1;
    }
    for (int mode = 0; mode < 2; ++mode) {
      for (int ctx : {1024, 4096, 16384, 65536}) {
        const bool prefill = mode == 1;
        if (prefill && ctx != 16384) continue;
        const int n_q = prefill ? ctx : 1;
        std::vector<float> q(size_t(n_q) * Hq * d), out(q.size());
        for (float& e : q) e = static_cast<float>(rng.gaussian());
        AttentionArgs a;
        a.q = q.data();
        a.n_q = n_q;
        a.n_q_heads = Hq;
        a.n_kv = ctx;
        a.n_kv_heads = H;
        a.d = d;
        a.k = {codec.get(), k.data()};
        a.v = {codec.get(), v.data()};
        a.causal_offset = prefill ? 0 : -1;
        a.out = out.data();
        auto ms = cuda::time_attention(a, prefill ? kf.data() : nullptr, prefill ? vf.data() : nullptr, min_s);
        if (!ms) { std::fprintf(stderr, "cuda_attn_bench: %s: %s\n", fmt, ms.error().c_str()); return 1; }
        const double t = *ms * 1e-3, tps = n_q / t;
        const double bytes = double(ctx) * H * 2 * rb;
        const std::string key = std::string(prefill ? "p" : "d") + std::to_string(ctx);
        if (std::string(fmt) == "f16") f16[key] = tps;
        std::printf("%-6s %-8s %7d %12.1f %10.4f %9.1f %7.1f %7.2fx\n", fmt, prefill ? "prefill" : "decode", ctx, tps,
                    t * 1e3, prefill ? 0.0 : bytes / t / 1e9, prefill ? 0.0 : 100.0 * bytes / t / 1e9 / *bw,
                    f16.count(key) ? tps / f16[key] : 0.0);
        std::fflush(stdout);
      }
    }
  }
  std::printf("targets: f16 decode at 64K >= 70%% of copy bandwidth; tq4 >= 3x f16, tq3 >= 3.5x; tq4 prefill 16K >= 0.9x f16\n");
  return 0;
}
