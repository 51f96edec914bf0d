// `turbokv bench-attn`: decode and prefill speed of the fused attention kernel
// per K/V format pair, context length and thread count, with the KV bytes each
// decode step must read and how close that is to the machine's copy bandwidth,
// measured in the same run (the floor for long-context attention is
// KV bytes / bandwidth).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "attention/attention.h"
#include "codec/calibrated.h"
#include "codec/format.h"
#include "cuda/cuda_backend.h"
#include "tools/arg_lists.h"
#include "tools/common_flags.h"
#include "tools/json_text.h"
#include "eval/kv_file.h"
#include "tools/subcommands.h"
#include "util/bandwidth.h"
#include "util/fma_peak.h"
#include "util/huge_buffer.h"
#include "util/progress.h"
#include "util/rng.h"
#include "util/simd_targets.h"

namespace tkv {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
  int d = 128, kv_heads = 8, q_heads = 32;
  std::string ctx = "1024,4096,16384,65536";
  std::string formats, ctk = "f16,q8_0,q4_0r,tq4,tq3", ctv;
  std::string threads = "0";
  int prefill_max = 4096;
  double min_time = 0.3;
  int repetitions = 1;  // rounds over the pairs, each ratio against f16 in the same round
  bool no_progress = false;
  bool json = false;
  std::string layout = "head";
  std::string basis_kv;  // "K.bin[,V.bin]": tqc bases fitted on real rows instead of synthetic ones
  bool basis_kv_given = false;
  std::string simd;      // force one SIMD target (its Highway name), as on a machine without the better ones
  std::string device = "cpu";  // cpu, or cuda (src/cuda/: the GPU's kernels, timed with CUDA events)
};

struct Quantized {
  std::unique_ptr<Codec> codec;
  // tqc formats: one codec per KV head on a synthetic basis (random
  // orthonormal, variances 1 to 1/16), as a calibration would give.
  std::vector<std::unique_ptr<Codec>> head_codecs;
  std::vector<const Codec*> heads;
  HugeBuffer rows;  // [max_ctx][kv_heads] or [kv_heads][max_ctx]
  const Codec* const* head_ptrs() const { return heads.empty() ? nullptr : heads.data(); }
  // Token-major rows [r0, r0 + n) of H heads from src into dst (row r0 first).
  void quantize(const float* src, size_t r0, size_t n, int H, uint8_t* dst) const {
    const size_t rb = codec->row_bytes();
    const int d = codec->dim();
    if (heads.empty()) {
      (void)codec->quantize(src + r0 * d, n, dst);
      return;
    }
    for (size_t r = r0; r < r0 + n; ++r) (void)heads[r % H]->quantize(src + r * d, 1, dst + (r - r0) * rb);
  }
};

int run(const Options& o) {
  const auto ctxs = parse_int_list(o.ctx, "--ctx", 1);
  const bool gpu = o.device == "cuda";
  std::string gpu_name;
  if (gpu) {
    auto info = cuda::device_info();
    if (!info) throw std::invalid_argument("--device cuda: " + info.error());
    gpu_name = info->name + " (" + std::to_string(info->sm_count) + " SMs, " +
               std::to_string(info->memory_bytes >> 30) + " GiB)";
  }
  // On the GPU the thread count is the kernels' own: one row per setting.
  const auto threads = gpu ? std::vector<int>{1} : parse_threads_list(o.threads, default_threads());
  if (o.q_heads % o.kv_heads != 0) throw std::invalid_argument("--q-heads must be a multiple of --kv-heads");
  auto fk = parse_format_list(o.formats.empty() ? o.ctk : o.formats);
  if (!fk) throw std::invalid_argument(fk.error());
  auto fv = parse_format_list(o.formats.empty() ? (o.ctv.empty() ? o.ctk : o.ctv) : o.formats);
  if (!fv) throw std::invalid_argument(fv.error());
  std::vector<std::pair<std::string, std::string>> pairs;
  if (!o.formats.empty() || o.ctv.empty()) {
    for (const auto& f : *fk) pairs.push_back({f, f});  // K and V alike
  } else {
    for (const auto& a : *fk)
      for (const auto& b : *fv) pairs.push_back({a, b});
  }
  if (!o.simd.empty()) {
    std::string names;
    int64_t bit = -1;
    for (const auto& t : simd_targets()) {
      names += (names.empty() ? "" : ", ") + t.name;
      if (t.name == o.simd) bit = t.bit;
    }
    if (bit < 0) throw std::invalid_argument("--simd " + o.simd + ": not a target of this build and machine (" + names + ")");
    simd_force_target(bit);
    // The integer kernels follow, as on a machine whose best target this is:
    // AVX-512 ones for AVX3 targets (AVX2 where the CPU lacks VBMI/VNNI),
    // AVX2 for AVX2, none below.
    const bool avx3 = o.simd.rfind("AVX3", 0) == 0;
    if (!(avx3 && set_int8_kernels("avx512")) && !((avx3 || o.simd == "AVX2") && set_int8_kernels("avx2")))
      set_int8_kernels("none");
  }
  const int max_ctx = *std::max_element(ctxs.begin(), ctxs.end());
  const int max_threads = *std::max_element(threads.begin(), threads.end());
  const int d = o.d, H = o.kv_heads;
  const size_t max_rows = size_t(max_ctx) * H;

  double copy_bw = 0, read_bw = 0;
  std::map<int, double> fma_gflops;  // per thread count: the compute ceiling
  if (gpu) {
    // The GPU's device-to-device copy (read + write traffic) is the ceiling
    // of a kernel that streams the cache; its compute peak is not measured.
    auto bw = cuda::copy_bandwidth_gbs();
    if (!bw) throw std::runtime_error("--device cuda: " + bw.error());
    copy_bw = read_bw = *bw;
    fma_gflops[1] = 0.0;
  } else {
    const auto bw = measure_bandwidth(max_threads);
    copy_bw = bw.copy_gbs;
    read_bw = bw.read_gbs;
    for (int th : threads) fma_gflops[th] = measure_fma_gflops(th);
  }
  if (gpu && !o.json) {
    std::cout << "bench-attn: CUDA on " << gpu_name << ", d " << d << ", " << H << " KV heads, " << o.q_heads
              << " query heads; copy bandwidth " << copy_bw << " GB/s (read+write traffic, device to device)\n"
              << "  floor per decode step: memory = KV bytes / copy bandwidth; times are CUDA events around the "
                 "kernels (rows already on the GPU; a prefill also quantizes its rows there)\n";
  } else if (!o.json) {
    std::cout << "bench-attn: " << simd_current_target() << " (integer kernels: " << int8_kernels() << "), d " << d << ", " << H << " KV heads, " << o.q_heads << " query heads; copy bandwidth "
              << copy_bw << " GB/s (read+write traffic, " << max_threads << " threads), read-only " << read_bw
              << " GB/s\n";
    for (auto [th, g] : fma_gflops)
      std::cout << "  FMA peak " << g << " GFLOP/s with " << th << " threads\n";
    std::cout << "  floors per decode step: memory = KV bytes / read-only bandwidth; compute = flops / FMA peak\n";
  }
  // Random K/V rows: a pool of Gaussians, tiled with a per-row offset.
  Rng rng(1);
  std::vector<float> pool(1 << 20);
  for (auto& x : pool) x = static_cast<float>(rng.gaussian());
  auto fill = [&](std::vector<float>& x, size_t rows, uint64_t salt) {
    x.resize(rows * d);
    for (size_t r = 0; r < rows; ++r) {
      const size_t off = (r * 7919 + salt * 104729) % (pool.size() - d);
      std::memcpy(&x[r * d], &pool[off], sizeof(float) * d);
    }
  };
  std::vector<float> kf, vf;
  fill(kf, max_rows, 1);
  fill(vf, max_rows, 2);

  // Bases of tqc formats per KV head, for K and V: fitted on real rows (each
  // file's head h % heads, all its tokens) or synthetic.
  std::vector<HeadBasis> kbases, vbases;
  for (int h = 0; h < H; ++h) {
    kbases.push_back(synthetic_head_basis(d, 1000 + h));
    vbases.push_back(kbases.back());
  }
  if (o.basis_kv_given) {
    std::vector<std::string> files{""};  // split on ',' keeping empty entries
    for (char c : o.basis_kv) {
      if (c == ',') files.emplace_back();
      else files.back().push_back(c);
    }
    const bool bad = files.empty() || files.size() > 2 ||
                     std::any_of(files.begin(), files.end(), [](const std::string& f) { return f.empty(); });
    if (bad) throw std::invalid_argument("--basis-kv takes K.bin or K.bin,V.bin, got '" + o.basis_kv + "'");
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string& path = files[i];
      auto kv = read_kv_file(path);
      if (!kv) throw std::invalid_argument("--basis-kv: " + kv.error());
      if (static_cast<int>(kv->head_dim) != d)
        throw std::invalid_argument("--basis-kv " + path + ": head dim " + std::to_string(kv->head_dim) +
                                    ", but --d is " + std::to_string(d));
      auto& bases = i == 0 ? kbases : vbases;
      for (int h = 0; h < H; ++h) {
        auto b = fit_head_basis(kv->head(static_cast<uint32_t>(h) % kv->kv_heads), kv->tokens, d);
        if (!b) throw std::invalid_argument("--basis-kv " + path + ": " + b.error());
        bases[h] = std::move(*b);
      }
    }
    if (files.size() == 1) vbases = kbases;
  }
  std::map<std::string, Quantized> cache;
  auto quantized = [&](const std::string& f, bool is_v) -> Quantized& {
    const std::string key = f + (is_v ? "/v" : "/k");
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    Quantized q;
    if (is_calibrated_format(f)) {
      const auto& bases = is_v ? vbases : kbases;
      for (int h = 0; h < H; ++h) {
        auto c = make_calibrated_codec(f, bases[h]);
        if (!c) throw std::runtime_error(c.error());
        q.heads.push_back(c->get());
        q.head_codecs.push_back(std::move(*c));
      }
      q.codec = std::move(*make_calibrated_codec(f, bases[0]));
      if (!o.json) {  // the allocation decides the decode paths: show it
        const auto a = calibrated_allocation(f, bases[0]);  // the codec above was made from it
        std::cout << "  " << f << (is_v ? " V" : " K") << " head 0 widths by " << a->group << " coordinates:";
        for (int i = 0; i < d; i += a->group) std::cout << " " << a->bits[i];
        std::cout << "\n";
      }
    } else {
      auto c = make_codec(f, d);
      if (!c) throw std::runtime_error(c.error());
      q.codec = std::move(*c);
    }
    q.rows = HugeBuffer(max_rows * q.codec->row_bytes() + 64);
    const auto& src = is_v ? vf : kf;
    const size_t chunk = 4096;
#pragma omp parallel for num_threads(max_threads) schedule(dynamic, 1)
    for (size_t r0 = 0; r0 < max_rows; r0 += chunk) {
      const size_t n = std::min(chunk, max_rows - r0);
      q.quantize(src.data(), r0, n, H, q.rows.data() + r0 * q.codec->row_bytes());
    }
    if (o.layout == "head") {  // [token][head] -> [head][token]
      const size_t rb = q.codec->row_bytes();
      HugeBuffer hm(q.rows.size());
      for (size_t t = 0; t < size_t(max_ctx); ++t)
        for (int h = 0; h < H; ++h)
          std::memcpy(hm.data() + (size_t(h) * max_ctx + t) * rb, q.rows.data() + (t * H + h) * rb, rb);
      q.rows = std::move(hm);
    }
    return cache.emplace(key, std::move(q)).first->second;
  };

  nlohmann::json results = nlohmann::json::array();
  const int reps = o.repetitions;
  if (!o.json) {
    std::printf("%-7s %-7s %7s %-8s %3s %12s %10s %10s %8s %7s %9s %8s %8s", "type_k", "type_v", "ctx", "mode", "thr",
                "tokens/s", "ms", "KV MB/step", "GB/s", "bw %", "vs f16", "mem ms", "flop ms");
    if (reps > 1) std::printf(" %13s", "vs f16 range");
    std::printf("\n");
  }
  // Per setting (context, threads, mode) every pair is measured in turn,
  // -r times over: a host whose speed drifts between seconds moves f16 and
  // the others alike within a round, so each ratio is taken against f16 in
  // the same round, and the table gives the medians (of the times, and of
  // the ratios) with the ratios' range.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  int f16_pair = -1;
  for (size_t i = 0; i < pairs.size(); ++i)
    if (pairs[i].first == "f16" && pairs[i].second == "f16") f16_pair = static_cast<int>(i);
  for (int ctx : ctxs)
    for (int th : threads)
      for (int mode = 0; mode < 2; ++mode) {
        const bool prefill = mode == 1;
        if (prefill && ctx > o.prefill_max) continue;
        const int n_q = prefill ? ctx : 1;
        std::vector<float> q(size_t(n_q) * o.q_heads * d), out(q.size());
        for (size_t i = 0; i < q.size(); ++i) q[i] = pool[(i * 31) % pool.size()];
        // One decode step (or prefill) of pair i: seconds, the median of its repeats.
        auto measure = [&](size_t i) {
          const auto& [tk, tv] = pairs[i];
          Quantized& K = quantized(tk, false);
          Quantized& V = quantized(tv, true);
          AttentionArgs a;
          a.q = q.data();
          a.n_q = n_q;
          a.n_q_heads = o.q_heads;
          a.n_kv = ctx;
          a.n_kv_heads = H;
          a.d = d;
          if (o.layout == "head") {
            a.k = {K.codec.get(), K.rows.data(), K.codec->row_bytes(), size_t(max_ctx) * K.codec->row_bytes(),
                   K.head_ptrs()};
            a.v = {V.codec.get(), V.rows.data(), V.codec->row_bytes(), size_t(max_ctx) * V.codec->row_bytes(),
                   V.head_ptrs()};
          } else {
            a.k = {K.codec.get(), K.rows.data(), 0, 0, K.head_ptrs()};
            a.v = {V.codec.get(), V.rows.data(), 0, 0, V.head_ptrs()};
          }
          a.causal_offset = prefill ? 0 : -1;
          a.threads = th;
          a.out = out.data();
          std::vector<uint8_t> kw, vw;
          if (prefill && !gpu) {  // a prefill also quantizes the rows it writes (on the GPU: there)
            kw.resize(size_t(ctx) * H * K.codec->row_bytes());
            vw.resize(size_t(ctx) * H * V.codec->row_bytes());
          }
          auto step = [&]() {
            if (prefill) {
              const size_t rows = size_t(ctx) * H, chunk = 1024;
#pragma omp parallel for num_threads(th) schedule(dynamic, 1)
              for (size_t r0 = 0; r0 < rows; r0 += chunk) {
                const size_t n = std::min(chunk, rows - r0);
                K.quantize(kf.data(), r0, n, H, kw.data() + r0 * K.codec->row_bytes());
                V.quantize(vf.data(), r0, n, H, vw.data() + r0 * V.codec->row_bytes());
              }
            }
            Status s = attention(a);
            if (!s.ok()) throw std::runtime_error(s.message());
          };
          if (gpu) {
            auto ms = cuda::time_attention(a, prefill ? kf.data() : nullptr, prefill ? vf.data() : nullptr, o.min_time);
            if (!ms) throw std::runtime_error(tk + "/" + tv + " ctx " + std::to_string(ctx) + ": " + ms.error());
            return *ms * 1e-3;
          }
          step();  // warm-up
          std::vector<double> times;
          const auto t_all = Clock::now();
          while (times.size() < 3 || (seconds_since(t_all) < o.min_time && times.size() < 100000)) {
            const auto t0 = Clock::now();
            step();
            times.push_back(seconds_since(t0));
          }
          std::sort(times.begin(), times.end());
          return times[times.size() / 2];
        };
        std::vector<std::vector<double>> t(pairs.size());  // [pair][round] seconds
        {
          Progress progress("bench-attn", int64_t(reps) * int64_t(pairs.size()), "runs", !o.no_progress);
          const std::string what = "ctx " + std::to_string(ctx) + ", " + std::to_string(th) + " threads, " +
                                   (prefill ? "prefill" : "decode");
          for (int r = 0; r < reps; ++r)
            for (size_t i = 0; i < pairs.size(); ++i) {
              progress.update(int64_t(r) * int64_t(pairs.size()) + int64_t(i),
                              what + ", round " + std::to_string(r + 1) + ": " + pairs[i].first + "/" + pairs[i].second);
              t[i].push_back(measure(i));
            }
        }
        for (size_t i = 0; i < pairs.size(); ++i) {
          const auto& [tk, tv] = pairs[i];
          const Quantized& K = quantized(tk, false);
          const Quantized& V = quantized(tv, true);
          const double tm = median(t[i]);
          // tokens/s against f16's in the same round: f16's time over this pair's.
          std::vector<double> ratios;
          if (f16_pair >= 0)
            for (int r = 0; r < reps; ++r) ratios.push_back(t[f16_pair][r] / t[i][r]);
          const double vs_f16 = ratios.empty() ? 0.0 : median(ratios);
          const double kv_bytes = double(ctx) * H * (K.codec->row_bytes() + V.codec->row_bytes());
          const double tps = n_q / tm;
          const double gbs = prefill ? 0.0 : kv_bytes / tm / 1e9;
          // Floors: QK and PV each cost 2 flops per (query head, visible token, dim).
          const double visible = prefill ? 0.5 * double(ctx) * (ctx + 1) : double(ctx);
          const double flops = 4.0 * o.q_heads * d * visible;
          const double floor_mem_ms = kv_bytes / (read_bw * 1e9) * 1e3;
          const double floor_flop_ms = fma_gflops[th] > 0 ? flops / (fma_gflops[th] * 1e9) * 1e3 : 0.0;
          std::vector<double> ms_each;
          for (double x : t[i]) ms_each.push_back(x * 1e3);
          nlohmann::json r = {{"type_k", tk},
                              {"type_v", tv},
                              {"ctx", ctx},
                              {"mode", prefill ? "prefill" : "decode"},
                              {"threads", th},
                              {"tokens_per_s", tps},
                              {"ms", tm * 1e3},
                              {"repetitions", reps},
                              {"ms_each", ms_each},
                              {"kv_bytes_per_step", prefill ? 0.0 : kv_bytes},
                              {"gb_per_s", gbs},
                              {"bandwidth_pct", prefill ? 0.0 : 100.0 * gbs / copy_bw},
                              {"copy_gb_per_s", copy_bw},
                              {"read_gb_per_s", read_bw},
                              {"fma_gflops", fma_gflops[th]},
                              {"floor_memory_ms", floor_mem_ms},
                              {"floor_compute_ms", floor_flop_ms},
                              {"d", d},
                              {"kv_heads", H},
                              {"q_heads", o.q_heads},
                              {"layout", o.layout},
                              {"tqc_bases", o.basis_kv.empty() ? "synthetic" : o.basis_kv},
                              {"simd", gpu ? std::string("cuda") : simd_current_target()},
                              {"int8_kernels", gpu ? std::string("none") : int8_kernels()},
                              {"device", gpu ? gpu_name : std::string("cpu")}};
          const double lo = ratios.empty() ? 0.0 : *std::min_element(ratios.begin(), ratios.end());
          const double hi = ratios.empty() ? 0.0 : *std::max_element(ratios.begin(), ratios.end());
          if (vs_f16 > 0) {
            r["speedup_vs_f16"] = vs_f16;
            r["speedup_vs_f16_min"] = lo;
            r["speedup_vs_f16_max"] = hi;
          }
          results.push_back(r);
          if (!o.json) {
            char ratio[32] = "-", range[32] = "-";
            if (vs_f16 > 0) {
              std::snprintf(ratio, sizeof(ratio), "%.2fx", vs_f16);
              std::snprintf(range, sizeof(range), "%.2f-%.2fx", lo, hi);
            }
            std::printf("%-7s %-7s %7d %-8s %3d %12.1f %10.3f %10.2f %8.2f %7.1f %9s %8.3f %8.3f", tk.c_str(),
                        tv.c_str(), ctx, prefill ? "prefill" : "decode", th, tps, tm * 1e3,
                        prefill ? 0.0 : kv_bytes / 1e6, gbs, prefill ? 0.0 : 100.0 * gbs / copy_bw, ratio,
                        floor_mem_ms, floor_flop_ms);
            if (reps > 1) std::printf(" %13s", range);
            std::printf("\n");
            std::fflush(stdout);
          }
        }
      }
  if (o.json) std::cout << json_text(results, 2) << "\n";
  return 0;
}

}  // namespace

void register_bench_attn(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("bench-attn", "Speed of fused attention on compressed KV rows");
  cmd->add_option("--d", opt->d, "head dim")->check(CLI::Range(8, 1024));
  cmd->add_option("--kv-heads", opt->kv_heads, "KV heads")->check(CLI::Range(1, 256));
  cmd->add_option("--q-heads", opt->q_heads, "query heads (a multiple of --kv-heads)")->check(CLI::Range(1, 1024));
  cmd->add_option("--ctx", opt->ctx, "context lengths, comma separated");
  cmd->add_option("--formats", opt->formats, "formats for K and V alike (overrides -ctk/-ctv)");
  cmd->add_option("--cache-type-k", opt->ctk, "K formats, comma separated (-ctk)");
  cmd->add_option("--cache-type-v", opt->ctv, "V formats (every K x V pair; -ctv); default: same as K");
  add_threads_list_flag(cmd, opt->threads);
  cmd->add_option("--prefill-max", opt->prefill_max, "largest context also run as a prefill");
  cmd->add_option("--min-time", opt->min_time, "seconds to repeat each measurement")->check(finite_range(0.0, 3600.0));
  cmd->add_option("-r,--repetitions", opt->repetitions,
                  "rounds: every pair measured in turn this many times, each ratio taken against f16 in the same "
                  "round; the table gives the medians and the ratios' range")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--simd", opt->simd, "run on this SIMD target only (e.g. AVX2 on an AVX-512 machine)");
  cmd->add_option_function<std::string>("--basis-kv", [opt](const std::string& v) { opt->basis_kv = v; opt->basis_kv_given = true; },
                  "tqc formats: fit each KV head's basis on a KV file's rows (K.bin or K.bin,V.bin; head h uses the "
                  "file's head h mod its heads) instead of synthetic variances 1 to 1/16");
  cmd->add_option("--device", opt->device, "cpu, or cuda: the GPU kernels, with the GPU's copy bandwidth as the ceiling")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--json", opt->json, "print a JSON list");
  add_no_progress_flag(cmd, opt->no_progress);
  cmd->add_option("--layout", opt->layout, "cache layout: head (head-major, each head's rows contiguous) or token")
      ->check(CLI::IsMember({"head", "token"}));
  cmd->callback([opt]() {
    try {
      run(*opt);
    } catch (const std::exception& e) {
      std::cerr << "turbokv bench-attn: error: " << e.what() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace tkv
