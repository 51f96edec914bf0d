#include <algorithm>
#include <cstdio>
#include "tools/demo.h"

#include <cmath>
#include <filesystem>
#include <string>

#include <unistd.h>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "eval/kv_file.h"
#include "cache/kv_cache.h"
#include "eval/calibrate.h"
#include "eval/perplexity.h"
#include "model/model.h"
#include "tools/shared_dir.h"
#include "tools/subcommands.h"
#include "tools/synthetic_kv.h"
#include "util/text_file.h"

namespace tkv {
namespace {

constexpr const char* kHeader =
    "turbokv: long context in little memory. Every KV head vector is rotated by a seeded\n"
    "random orthogonal transform, which makes each coordinate follow one known distribution;\n"
    "coordinates are then quantized with the Lloyd-Max codebook optimal for it, plus one\n"
    "16-bit norm per vector. No calibration, no per-block scales, one codebook per (d, bits).\n"
    "Below: what each KV format loses. rel MSE = sum|x - x^|^2 / sum|x|^2; RD ratio = rel MSE\n"
    "over the rate-distortion bound 4^-bits; IP / attn err = relative error of q.k and of the\n"
    "attention output softmax(q.K/sqrt d) V for 64 random queries per head. Mean-centred:\n"
    "each head codes x - mu (mu = mean of its first 64 vectors) and adds mu back, exactly.\n";

const KvStatsRow* find_row(const std::vector<KvStatsRow>& rows, const std::string& format, bool centered) {
  for (const auto& r : rows)
    if (r.format == format && r.mean_centered == centered) return &r;
  return nullptr;
}

bool is_tq(const std::string& f) { return f.rfind("tq", 0) == 0; }

std::string fewer_or_equal(double a_bits, double b_bits) {
  return a_bits < b_bits - 1e-9 ? "at fewer bits" : "at equal bits";
}

}  // namespace

const std::vector<std::string>& demo_formats() {
  static const std::vector<std::string> f = {"f16", "q8_0", "q8_0r", "q4_0", "q4_0r", "tq2",
                                             "tq3", "tq3.5", "tq4", "tq4.5", "tq5"};
  return f;
}

std::vector<std::string> demo_verdicts(const std::vector<KvStatsRow>& rows) {
  std::vector<const KvStatsRow*> plain;
  for (const auto& r : rows)
    if (!r.mean_centered) plain.push_back(&r);
  std::vector<std::string> out;
  char buf[320];
  for (const KvStatsRow* f : plain) {
    std::snprintf(buf, sizeof buf, "%s: %.3f bits/value, %.1fx smaller than f16, rel MSE %.2g", f->format.c_str(),
                  f->bits_per_value, f->size_vs_f16, f->rel_mse);
    std::string line = buf;
    if (f->rel_mse > 0) {
      std::snprintf(buf, sizeof buf, " (%.1fx the rate-distortion bound)", f->rd_ratio);
      line += buf;
    }
    if (const KvStatsRow* c = find_row(rows, f->format, true); c && f->rel_mse > 0) {  // DESIGN.md 1.4
      std::snprintf(buf, sizeof buf, ", %.2g mean-centred", c->rel_mse);
      line += buf;
    }
    std::snprintf(buf, sizeof buf, ", attention error %.2g%%", 100.0 * f->attn_rel_err);
    line += buf;
    // The strongest baseline this format beats with no more bits...
    const KvStatsRow* beaten = nullptr;
    for (const KvStatsRow* g : plain)
      if (g != f && !is_tq(g->format) && g->bits_per_value >= f->bits_per_value - 1e-9 &&
          g->rel_mse > f->rel_mse && (!beaten || g->rel_mse < beaten->rel_mse))
        beaten = g;
    // ...or, for a baseline, the smallest tq format that does better.
    const KvStatsRow* better = nullptr;
    if (!is_tq(f->format))
      for (const KvStatsRow* g : plain)
        if (is_tq(g->format) && g->bits_per_value <= f->bits_per_value + 1e-9 && g->rel_mse < f->rel_mse &&
            (!better || g->bits_per_value < better->bits_per_value))
          better = g;
    // ...else, for tq, how it compares with the largest baseline below it.
    const KvStatsRow* below = nullptr;
    for (const KvStatsRow* g : plain)
      if (!is_tq(g->format) && g->bits_per_value < f->bits_per_value &&
          (!below || g->bits_per_value > below->bits_per_value ||
           (g->bits_per_value == below->bits_per_value && g->rel_mse < below->rel_mse)))
        below = g;
    if (f->rel_mse == 0) {
      line += " -- lossless on these vectors";
    } else if (beaten) {
      line += " -- beats " + beaten->format + " " + fewer_or_equal(f->bits_per_value, beaten->bits_per_value);
    } else if (better) {
      line += " -- " + better->format + " does better " + fewer_or_equal(better->bits_per_value, f->bits_per_value);
    } else if (is_tq(f->format) && below && f->rel_mse < below->rel_mse) {
      std::snprintf(buf, sizeof buf, " -- %.1fx less error than %s for %+.2f bits", below->rel_mse / f->rel_mse,
                    below->format.c_str(), f->bits_per_value - below->bits_per_value);
      line += buf;
    } else if (is_tq(f->format) && !below) {
      line += " -- no baseline format here is this small";
    } else {
      line += " -- nothing here does better at no more bits";
    }
    out.push_back(line);
  }
  return out;
}

// The main job end to end: the reference model writes a short text on the
// default cache (tq4 K and V, mean centring on), on f16 and the baselines,
// and on a policy calibrated on other text (tqc4), side by side.
Status demo_generate(std::ostream& out) {
  const auto path = find_shared_file("models/ref-5m/ref-5m-f32.gguf");
  if (!path) {
    out << "\n(shared/models/ref-5m not found: set TKV_SHARED to see the reference model generate text)\n";
    return Status::Ok();
  }
  auto m = Model::load(path->string());
  if (!m) return m.status();
  const Model& model = **m;
  const ModelConfig& c = model.config();
  // A prompt longer than the 64-token f16 staging window, so the mean is fixed
  // from the prompt and every row is coded in the chosen format.
  const std::string prompt =
      "The history of the city began in the year when the river was first crossed by a bridge of stone. "
      "Merchants came from the north and the south, and the market grew along both banks. The old town "
      "hall still stands near the square, and every spring the people of the city";
  out << "\nThe reference model (" << path->string() << ", " << c.n_layer << " layers, head dim " << c.head_dim
      << "), greedy, 40 tokens after a " << model.tokenizer().encode(prompt, true).size()
      << "-token prompt about a city:\n";
  // Mean KL divergence against an f32 cache on the first 4 chunks of
  // WikiText-2 (-c 512), when shared/ has it: one sample of greedy text says
  // little, this says how far each cache moves the model.
  const auto wiki = find_shared_file("data/text/wikitext-2-raw-test.txt");
  std::string wiki_text;
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("tkv_demo_" + std::to_string(::getpid()) + ".kl")).string();
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } remove_base{base};
  if (wiki) {
    auto t = read_text_file(wiki->string());
    if (!t) return t.status();
    wiki_text = normalize_newlines(*t);
    PerplexityOptions po;
    po.max_chunks = 4;
    po.cache.type_k = po.cache.type_v = "f32";
    po.kl_base = base;
    po.kl_write = true;
    auto r = perplexity(model, wiki_text, po);
    if (!r) return r.status();
  }
  auto kld = [&](const KvCacheOptions& co) -> Expected<std::string> {
    if (!wiki) return std::string("no KLD");
    PerplexityOptions po;
    po.max_chunks = 4;
    po.cache = co;
    po.kl_base = base;
    auto r = perplexity(model, wiki_text, po);
    if (!r) return r.status();
    char b[48];
    std::snprintf(b, sizeof(b), "KLD %.5f", r->kl.mean);
    return std::string(b);
  };
  auto generate = [&](const std::string& label, KvCacheOptions co) -> Status {
    const auto k = kld(co);
    if (!k) return k.status();
    co.capacity = 128;
    auto cache = KvCache::create(c.kv_shape(), co);
    if (!cache) return cache.status();
    std::vector<int32_t> seq = model.tokenizer().encode(prompt, true);
    const size_t n_prompt = seq.size();
    std::vector<float> logits(c.n_vocab);
    Status s = model.forward(seq.data(), static_cast<int>(seq.size()), 0, **cache, 2, logits.data());
    for (int i = 0; s.ok() && i < 40; ++i) {
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      seq.push_back(next);
      s = model.forward(&next, 1, static_cast<int>(seq.size()) - 1, **cache, 2, logits.data());
    }
    if (!s.ok()) return s;
    std::string text = model.tokenizer().decode(std::vector<int32_t>(seq.begin() + n_prompt, seq.end()));
    for (auto& ch : text)
      if (ch == '\n') ch = ' ';
    char head[200];
    std::snprintf(head, sizeof(head), "  %-5s KV %6.1f KiB (%.3f bits/value, %s): ", label.c_str(),
                  ((*cache)->k_bytes() + (*cache)->v_bytes()) / 1024.0,
                  0.5 * ((*cache)->k_bits_per_value() + (*cache)->v_bits_per_value()), k->c_str());
    out << head << text << "\n";
    return Status::Ok();
  };
  for (const char* fmt : {"f16", "q4_0r", "tq4", "tq3", "tq2"}) {
    KvCacheOptions co;
    co.type_k = co.type_v = fmt;
    Status s = generate(fmt, co);
    if (!s.ok()) return s;
  }
  // A calibrated policy (turbokv calibrate) at tq4's size, fitted on other text.
  const auto essays = find_shared_file("data/niah/paul-graham-essays");
  if (essays) {
    auto text = read_text_path(essays->string());
    if (!text) return text.status();
    CalibrateOptions o;
    o.tokens = 4096;
    o.bits = 4.25;
    auto pol = calibrate(model, *text, o);
    if (!pol) return pol.status();
    KvCacheOptions co;
    co.policy = std::make_shared<const KvPolicy>(std::move(*pol));
    Status s = generate("tqc4", co);
    if (!s.ok()) return s;
    out << "  (tqc4: per-head bases and means calibrated on 4096 tokens of " << essays->string()
        << ", as `turbokv calibrate --bits 4.25` does; tq4's size)\n";
  }
  if (wiki) {
    out << "  (KLD: mean KL divergence of the next-token distribution against an f32 cache, first 4 chunks of\n"
        << "   " << wiki->string() << ", -c 512; `turbokv perplexity --kl-divergence` on all chunks: docs/RESULTS.md)\n";
  }
  return Status::Ok();
}

Status run_demo(std::ostream& out) {
  out << kHeader << "\n";
  KvStatsOptions opt;
  opt.formats = demo_formats();

  auto synth = kv_stats(synthetic_kv({}), "synthetic", opt);
  if (!synth) return synth.status();
  out << "Synthetic keys (2 heads x 2048 vectors, d = 128; channel RMS 0.2..6, log-normal,\n"
         "~half the energy in per-channel means, like real keys):\n"
      << kv_stats_table(*synth) << "\n";

  const std::vector<KvStatsRow>* verdict_rows = &*synth;
  std::string verdict_on = "synthetic keys";
  std::vector<KvStatsRow> real_keys;
  const std::string dir = "data/kv/qwen3.5-0.8b/";
  for (const char* which : {"keys", "values"}) {
    const std::string rel = dir + "layer3_" + which + ".bin";
    const auto path = find_shared_file(rel);
    if (!path) {
      out << "(shared/" << rel << " not found: set TKV_SHARED to show real Qwen3.5-0.8B " << which << ")\n\n";
      continue;
    }
    auto kv = read_kv_file(path->string());
    if (!kv) return kv.status();
    auto rows = kv_stats(*kv, path->string(), opt);
    if (!rows) return rows.status();
    out << "Real Qwen3.5-0.8B layer-3 " << which << " (" << kv->kv_heads << " heads x " << kv->tokens
        << " tokens, d = " << kv->head_dim << ", " << path->string() << "):\n"
        << kv_stats_table(*rows) << "\n";
    if (std::string(which) == "keys") {
      real_keys = std::move(*rows);
      verdict_rows = &real_keys;
      verdict_on = "real Qwen3.5-0.8B layer-3 keys";
    }
  }
  out << "Verdict on " << verdict_on << " (plain; lower rel MSE at no more bits beats):\n";
  for (const auto& line : demo_verdicts(*verdict_rows)) out << "  " << line << "\n";
  return demo_generate(out);
}

void register_demo(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("demo", "Show what turbokv does on synthetic and real KV vectors");
  sub->callback([] {
    Status s = run_demo(std::cout);
    if (!s.ok()) {
      std::cerr << "turbokv demo: error: " << s.message() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace tkv
