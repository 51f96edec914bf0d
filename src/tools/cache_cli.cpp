// `turbokv cache build|info|verify|bench`: keep a document's KV cache in a
// file (cache/cache_file.h, docs/FORMATS.md §4d).
//   build  -m MODEL -f DOC -o FILE [cache flags]   prefill a document and save it
//   info   FILE                                     header, formats, tokens, bytes, checksums
//   verify FILE [-m MODEL [--kv-policy P]]          every checksum; with -m, that it loads for MODEL
//   bench  -m MODEL [-f DOC] [--tokens 8192]        save/load speed against the file-read bandwidth,
//                                                   time to first token loaded vs recomputed
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cache/cache_file.h"
#include "model/model.h"
#include "model/prompt_cache.h"
#include "tools/common_flags.h"
#include "tools/json_text.h"
#include "tools/kv_flags.h"
#include "tools/subcommands.h"
#include "util/progress.h"
#include "util/rng.h"
#include "util/text_file.h"

namespace tkv {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Prefill progress (util/progress.h): one line on a terminal, cleared at the end.
std::function<void(int, int)> progress_line(const char* what, bool enabled) {
  auto p = std::make_shared<Progress>(what, 0, "tokens", enabled);
  return [p](int done, int total) {
    p->set_total(total);
    p->update(done);
    if (done == total) p->done();
  };
}

// The cache options a file was made with (formats, seed, mean centring); a
// policy's calibration is not in the file and comes from --kv-policy.
KvCacheOptions options_from_header(const CacheFileHeader& h) {
  KvCacheOptions o;
  o.layer_type_k = h.type_k;
  o.layer_type_v = h.type_v;
  o.seed = h.seed;
  o.mean_center = h.mean_rows > 0;
  if (h.mean_rows > 0) o.mean_tokens = h.mean_rows;
  o.capacity = std::max(1, h.n_tokens);
  return o;
}

// "tq4 (all layers)" or "tq5-ip tq4-ip tq4-ip tq5-ip".
std::string format_list(const std::vector<std::string>& f) {
  bool same = true;
  for (const auto& x : f) same = same && x == f[0];
  if (same) return f[0] + " (all " + std::to_string(f.size()) + " layers)";
  std::string s;
  for (const auto& x : f) s += (s.empty() ? "" : " ") + x;
  return s;
}

std::vector<int32_t> document_tokens(const Model& m, const std::string& file, int max_tokens, const char* cmd) {
  std::vector<int32_t> toks;
  if (!file.empty()) {
    auto text = read_text_path(file);
    if (!text) fail_command(cmd, text.error());
    toks = m.tokenizer().encode(*text, true);
    if (max_tokens > 0) {
      // A short document is repeated (bench): the cache's speed depends on its size, not its text.
      const std::vector<int32_t> once(toks.begin() + 1, toks.end());
      while (static_cast<int>(toks.size()) < max_tokens && !once.empty()) toks.insert(toks.end(), once.begin(), once.end());
      toks.resize(std::min<size_t>(toks.size(), max_tokens));
    }
  } else {
    Rng rng(7);
    toks.push_back(m.tokenizer().bos() >= 0 ? m.tokenizer().bos() : 1);
    while (static_cast<int>(toks.size()) < max_tokens)
      toks.push_back(static_cast<int32_t>(rng.next() % static_cast<uint64_t>(m.config().n_vocab)));
  }
  if (toks.empty()) fail_command(cmd, "the document has no tokens");
  return toks;
}

void add_build(CLI::App& parent) {
  struct Opt {
    std::string model, file, out;
    int ctx = 0, threads = 0, batch = 512;
    bool no_progress = false;
    CacheFlags cache{"tq4", "tq4"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = parent.add_subcommand("build", "Prefill a document and save its KV cache");
  add_model_flag(cmd, o->model);
  cmd->add_option("-f,--file", o->file, "document: a text file, or a directory of .txt files")->required();
  cmd->add_option("-o,--output", o->out, "cache file to write")->required();
  cmd->add_option("-c,--ctx-size", o->ctx, "most tokens to keep (0: the whole document)")->check(CLI::Range(0, 1 << 26));
  add_threads_flag(cmd, o->threads);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->add_option("-b,--batch-size", o->batch, "tokens per forward pass")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  add_cache_flags(cmd, o->cache);
  cmd->callback([o]() {
    const char* name = "cache build";
    auto m = Model::load(o->model);
    if (!m) fail_command(name, m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    auto text = read_text_path(o->file);
    if (!text) fail_command(name, text.error());
    std::vector<int32_t> toks = model.tokenizer().encode(*text, true);
    if (o->ctx > 0 && static_cast<int>(toks.size()) > o->ctx) {
      std::fprintf(stderr, "cache build: the document has %zu tokens; keeping the first %d (-c)\n", toks.size(), o->ctx);
      toks.resize(o->ctx);
    }
    KvCacheOptions co;
    if (Status s = apply_cache_flags(o->cache, model, co); !s.ok()) fail_command(name, s.message());
    // At least mean_tokens of capacity: a shorter capacity would fix the
    // means from fewer rows than a run's cache, and the file would not load
    // into one ("mean centring over N rows").
    co.capacity = std::max(static_cast<int>(toks.size()), co.mean_tokens);
    auto cache = KvCache::create(c.kv_shape(), co);
    if (!cache) fail_command(name, cache.error());
    std::vector<float> logits(c.n_vocab);
    const auto t0 = Clock::now();
    Status s = prefill(model, toks.data(), static_cast<int>(toks.size()), 0, **cache, resolve_threads(o->threads), o->batch,
                       logits.data(), progress_line("cache build: prefill", !o->no_progress));
    if (!s.ok()) fail_command(name, s.message());
    const double t_prefill = since(t0);
    const auto t1 = Clock::now();
    s = save_cache_file(o->out, **cache, model.fingerprint(), toks);
    if (!s.ok()) fail_command(name, s.message());
    const double t_save = since(t1);
    std::ifstream f(o->out, std::ios::binary | std::ios::ate);
    const double bytes = static_cast<double>(f.tellg());
    std::printf("%s: %zu tokens, K %s V %s, %.2f MiB (%.3f bits/value K, %.3f V), prefill %.2f s, save %.3f s\n",
                o->out.c_str(), toks.size(), o->cache.k_label().c_str(), o->cache.v_label().c_str(), bytes / 1048576.0,
                (*cache)->k_bits_per_value(), (*cache)->v_bits_per_value(), t_prefill, t_save);
  });
}

void add_info(CLI::App& parent) {
  struct Opt {
    std::string file;
    bool json = false;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = parent.add_subcommand("info", "Print a cache file's header, formats, size and checksums");
  cmd->add_option("file", o->file, "cache file")->required();
  cmd->add_flag("--json", o->json, "one JSON object");
  cmd->callback([o]() {
    auto src = open_file_source(o->file);
    if (!src) fail_command("cache info", src.error());
    CacheFileHeader h;
    const Status ok = verify_cache_file(**src, &h);
    if (!ok.ok()) {
      auto hh = read_cache_header(**src);  // the header alone may still be readable
      if (!hh) fail_command("cache info", o->file + ": " + ok.message());
      h = *hh;
    }
    const double values = 2.0 * h.n_tokens * h.n_layer * h.n_kv_heads * h.head_dim;
    const double bpv = values > 0 ? 8.0 * h.row_payload_bytes / values : 0;
    const double overhead = h.row_payload_bytes ? double(h.file_bytes - h.row_payload_bytes) / h.row_payload_bytes : 0;
    if (o->json) {
      nlohmann::json j = {{"file", o->file}, {"version", h.version}, {"model", h.model}, {"policy", h.policy},
                          {"seed", h.seed}, {"n_layer", h.n_layer}, {"n_kv_heads", h.n_kv_heads},
                          {"head_dim", h.head_dim}, {"n_tokens", h.n_tokens}, {"mean_rows", h.mean_rows},
                          {"type_k", h.type_k}, {"type_v", h.type_v}, {"file_bytes", h.file_bytes},
                          {"row_bytes", h.row_payload_bytes}, {"bits_per_value", bpv}, {"overhead", overhead},
                          {"checksums_ok", ok.ok()}, {"error", ok.ok() ? "" : ok.message()}};
      std::printf("%s\n", json_text(j).c_str());
    } else {
      std::printf("file:          %s (format version %u)\n", o->file.c_str(), h.version);
      std::printf("model:         fingerprint %016llx, %d layers, %d KV heads, head dim %d\n",
                  static_cast<unsigned long long>(h.model), h.n_layer, h.n_kv_heads, h.head_dim);
      std::printf("tokens:        %d\n", h.n_tokens);
      std::printf("K formats:     %s\n", format_list(h.type_k).c_str());
      std::printf("V formats:     %s\n", format_list(h.type_v).c_str());
      std::printf("policy:        %s\n", h.policy ? ("fingerprint " + std::to_string(h.policy)).c_str() : "none");
      std::printf("codec seed:    %016llx\n", static_cast<unsigned long long>(h.seed));
      std::printf("mean centring: %s\n", h.mean_rows ? ("on, means from the first " + std::to_string(h.mean_rows) + " rows").c_str()
                                                      : (h.policy ? "policy means" : "off"));
      std::printf("size:          %llu bytes, %llu of them rows (%.3f bits/value), overhead %.3f%%\n",
                  static_cast<unsigned long long>(h.file_bytes), static_cast<unsigned long long>(h.row_payload_bytes), bpv,
                  100.0 * overhead);
      std::printf("checksums:     %s\n", ok.ok() ? "ok" : ok.message().c_str());
    }
    if (!ok.ok()) throw CLI::RuntimeError(1);
  });
}

void add_verify(CLI::App& parent) {
  struct Opt {
    std::string file, model;
    KvPolicyFlags kv;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = parent.add_subcommand("verify", "Check every checksum of a cache file (and, with -m, that it loads)");
  cmd->add_option("file", o->file, "cache file")->required();
  cmd->add_option("-m,--model", o->model, "also check it belongs to this model and loads");
  add_kv_policy_flags(cmd, o->kv);
  cmd->callback([o]() {
    const char* name = "cache verify";
    auto src = open_file_source(o->file);
    if (!src) fail_command(name, src.error());
    CacheFileHeader h;
    if (Status s = verify_cache_file(**src, &h); !s.ok()) fail_command(name, o->file + ": " + s.message());
    if (!o->model.empty()) {
      auto m = Model::load(o->model);
      if (!m) fail_command(name, m.error());
      const ModelConfig& c = (*m)->config();
      KvCacheOptions co = options_from_header(h);
      if (Status s = apply_kv_policy_flags(o->kv, **m, co); !s.ok()) fail_command(name, s.message());
      auto l = load_cache_file(**src, c.kv_shape(), co, (*m)->fingerprint(), c.n_vocab);
      if (!l) fail_command(name, o->file + ": " + l.error());
    }
    std::printf("%s: ok (%d tokens, %llu bytes, every checksum matches%s)\n", o->file.c_str(), h.n_tokens,
                static_cast<unsigned long long>(h.file_bytes), o->model.empty() ? "" : ", loads for this model");
  });
}

// Best of `reps` timings of f().
template <class F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t = Clock::now();
    f();
    best = std::min(best, since(t));
  }
  return best;
}

void add_bench(CLI::App& parent) {
  struct Opt {
    std::string model, file, out = "/tmp/turbokv-cache-bench.tkvc", json_out, from;
    int tokens = 8192, threads = 0, batch = 512, reps = 3;
    bool no_progress = false;
    CacheFlags cache{"tq4", "tq4"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = parent.add_subcommand("bench", "Save and load speed of a document's cache, and time to first token");
  add_model_flag(cmd, o->model);
  cmd->add_option("-f,--file", o->file, "document (repeated up to --tokens; default: random tokens)");
  cmd->add_option("--tokens", o->tokens, "document tokens")->capture_default_str()->check(CLI::Range(2, 1 << 24));
  cmd->add_option("-o,--output", o->out, "cache file to write")->capture_default_str();
  add_threads_flag(cmd, o->threads);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->add_option("-b,--batch-size", o->batch, "tokens per forward pass")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("-r,--repetitions", o->reps, "timed repetitions (best is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  add_json_out_flag(cmd, o->json_out);
  cmd->add_option("--from", o->from, "start from this cache file instead of a prefill (time to first token without it is then not measured)");
  add_cache_flags(cmd, o->cache);
  cmd->callback([o]() {
    const char* name = "cache bench";
    auto m = Model::load(o->model);
    if (!m) fail_command(name, m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    const int threads = resolve_threads(o->threads);
    KvCacheOptions co;
    if (Status s = apply_cache_flags(o->cache, model, co); !s.ok()) fail_command(name, s.message());
    std::vector<int32_t> doc;
    std::unique_ptr<KvCache> cache;
    std::vector<float> logits(c.n_vocab);
    double t_cold = -1;  // not measured with --from
    if (!o->from.empty()) {
      auto src = open_file_source(o->from);
      if (!src) fail_command(name, src.error());
      auto h = read_cache_header(**src);
      if (!h) fail_command(name, o->from + ": " + h.error());
      co.capacity = std::max(h->n_tokens + 1, co.mean_tokens);  // as `cache build` (see there)
      auto l = load_cache_file(**src, c.kv_shape(), co, model.fingerprint(), c.n_vocab);
      if (!l) fail_command(name, o->from + ": " + l.error());
      doc = std::move(l->tokens);
      cache = std::move(l->cache);
    } else {
      doc = document_tokens(model, o->file, o->tokens, name);
      co.capacity = std::max(static_cast<int>(doc.size()) + 1, co.mean_tokens);  // the document and one new token
      auto made = KvCache::create(c.kv_shape(), co);
      if (!made) fail_command(name, made.error());
      cache = std::move(*made);
    }
    const int n = static_cast<int>(doc.size());
    if (n < 1) fail_command(name, "the cache file holds no tokens");
    const int32_t question = doc[n / 2];
    // Cold: the document's prefill, then one new token (time to first token without a cache).
    auto t0 = Clock::now();
    Status s;
    if (o->from.empty()) {
      s = prefill(model, doc.data(), n, 0, *cache, threads, o->batch, logits.data(), progress_line("cache bench: prefill", !o->no_progress));
      if (!s.ok()) fail_command(name, s.message());
    }
    const double t_prefill = since(t0);
    t0 = Clock::now();
    s = model.forward(&question, 1, n, *cache, threads, logits.data());
    if (!s.ok()) fail_command(name, s.message());
    if (o->from.empty()) t_cold = t_prefill + since(t0);
    if (Status ts = cache->truncate(n); !ts.ok()) fail_command(name, ts.message());
    // Save.
    Status ss;
    const double t_save = best_of(o->reps, [&] { ss = save_cache_file(o->out, *cache, model.fingerprint(), doc); });
    if (!ss.ok()) fail_command(name, ss.message());
    const size_t rows = cache->k_bytes() / co.capacity * n + cache->v_bytes() / co.capacity * n;
    // The machine's file-read bandwidth: the same file read with plain read()
    // into a buffer already touched, from the page cache (hot) and from the
    // disk after the file's pages were dropped (cold); each load is timed the
    // same two ways, into a fresh cache (its page faults included).
    auto src = open_file_source(o->out);
    if (!src) fail_command(name, src.error());
    const uint64_t bytes = (*src)->size();
    src->reset();
    std::vector<uint8_t> buf(bytes);
    std::fill(buf.begin(), buf.end(), uint8_t(1));
    auto evict = [&] {
      const int fd = ::open(o->out.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        ::close(fd);
      }
    };
    auto plain_read = [&] {
      const int fd = ::open(o->out.c_str(), O_RDONLY | O_CLOEXEC);
      for (uint64_t off = 0; fd >= 0 && off < bytes;) {
        const ssize_t r = ::read(fd, buf.data() + off, std::min<uint64_t>(bytes - off, 1 << 30));
        if (r <= 0) break;
        off += static_cast<uint64_t>(r);
      }
      if (fd >= 0) ::close(fd);
    };
    Status ls;
    std::unique_ptr<KvCache> loaded;
    auto load = [&] {
      auto l = load_cache_file(o->out, c.kv_shape(), co, model.fingerprint(), c.n_vocab);
      ls = l.status();
      if (l) loaded = std::move(l->cache);
    };
    plain_read();  // warm
    const double t_read = best_of(o->reps + 2, plain_read);
    auto best_load = [&](bool cold) {  // freeing the previous cache is not part of a load
      double best = 1e30;
      for (int i = 0; i < o->reps; ++i) {
        loaded.reset();
        if (cold) evict();
        best = std::min(best, best_of(1, load));
      }
      return best;
    };
    const double t_load = best_load(false);
    if (!ls.ok()) fail_command(name, ls.message());
    double t_read_cold = 1e30;
    for (int i = 0; i < o->reps; ++i) {
      evict();
      t_read_cold = std::min(t_read_cold, best_of(1, plain_read));
    }
    const double t_load_cold = best_load(true);
    if (!ls.ok()) fail_command(name, ls.message());
    std::vector<float> warm_logits(c.n_vocab);
    t0 = Clock::now();
    s = model.forward(&question, 1, n, *loaded, threads, warm_logits.data());
    if (!s.ok()) fail_command(name, s.message());
    const double t_warm = t_load + since(t0);
    const bool same = std::equal(logits.begin(), logits.end(), warm_logits.begin());
    const double gbs_read = bytes / t_read / 1e9, gbs_load = bytes / t_load / 1e9;
    const double gbs_read_cold = bytes / t_read_cold / 1e9, gbs_load_cold = bytes / t_load_cold / 1e9;
    std::printf("cache bench: %s, %d tokens, K %s V %s, %d threads\n", o->model.c_str(), n, o->cache.k_label().c_str(),
                o->cache.v_label().c_str(), threads);
    std::printf("  file %.2f MiB (rows %.2f MiB, overhead %.3f%%)\n", bytes / 1048576.0, rows / 1048576.0,
                100.0 * (double(bytes) - double(rows)) / double(rows));
    std::printf("  save %.1f ms (%.2f GB/s, fsync included)\n", t_save * 1e3, bytes / t_save / 1e9);
    std::printf("  load, file in the page cache: %.1f ms, %.2f GB/s; plain read() of the same file %.2f GB/s: load at %.0f%% of it\n",
                t_load * 1e3, gbs_load, gbs_read, 100.0 * gbs_load / gbs_read);
    std::printf("  load, file read from disk:    %.1f ms, %.2f GB/s; plain read() of the same file %.2f GB/s: load at %.0f%% of it\n",
                t_load_cold * 1e3, gbs_load_cold, gbs_read_cold, 100.0 * gbs_load_cold / gbs_read_cold);
    if (t_cold >= 0)
      std::printf("  time to first token: recomputed %.3f s, loaded %.4f s: %.1fx faster; logits %s\n", t_cold, t_warm,
                  t_cold / t_warm, same ? "bitwise equal" : "DIFFER");
    else
      std::printf("  time to first token: loaded %.4f s (recomputing not measured: --from); logits %s\n", t_warm,
                  same ? "bitwise equal" : "DIFFER");
    if (!o->json_out.empty()) {
      nlohmann::json j = {{"bench", "cache"}, {"model", o->model}, {"tokens", n}, {"type_k", o->cache.k_label()},
                          {"type_v", o->cache.v_label()}, {"threads", threads}, {"file_bytes", bytes},
                          {"row_bytes", rows}, {"save_s", t_save}, {"load_s", t_load}, {"read_gbs", gbs_read},
                          {"load_gbs", gbs_load}, {"read_disk_gbs", gbs_read_cold}, {"load_disk_gbs", gbs_load_cold},
                          {"ttft_cold_s", t_cold >= 0 ? nlohmann::json(t_cold) : nlohmann::json()},
                          {"ttft_loaded_s", t_warm},
                          {"logits_equal", same}, {"command", command_line()}};
      std::ofstream(o->json_out, std::ios::app) << json_text(j) << "\n";
    }
    if (!same) fail_command(name, "the loaded cache gave other logits than the one it was saved from");
  });
}

}  // namespace

void register_cache(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("cache", "Keep KV caches in files: build, info, verify, bench");
  cmd->require_subcommand(1);
  add_build(*cmd);
  add_info(*cmd);
  add_verify(*cmd);
  add_bench(*cmd);
}

}  // namespace tkv
