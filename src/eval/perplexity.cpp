#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "eval/kl_base.h"
#include "util/hash.h"


namespace tkv {
namespace {

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double pos = q * (v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double f = pos - i;
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

}  // namespace

std::string normalize_newlines(std::string text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i)
    if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) out += text[i];
  return out;
}

Expected<PerplexityResult> perplexity(const Model& model, const std::string& text, const PerplexityOptions& o,
                                      const std::function<void(int, int, double)>& progress) {
  const ModelConfig& c = model.config();
  const int n_ctx = o.n_ctx, V = c.n_vocab;
  if (n_ctx < 8) return Status::Error("perplexity: -c must be at least 8");
  // A base file to compare with: turbokv's (TVKL, exact rows, bound to the
  // model and text) or llama.cpp's (_logits_: its own tokens, packed rows).
  std::ofstream kl_out;
  std::ifstream kl_in;
  bool llama_base = false;
  LlamaKlBase lbase;
  uint64_t base_size = 0;
  if (!o.kl_base.empty() && !o.kl_write) {
    kl_in.open(o.kl_base, std::ios::binary | std::ios::ate);
    if (!kl_in) return Status::Error(o.kl_base + ": cannot open the KL base file");
    const std::streamoff size = kl_in.tellg();
    base_size = size < 0 ? 0 : uint64_t(size);
    kl_in.seekg(0);
    llama_base = is_llama_kl(kl_in);
  }
  std::vector<int32_t> tokens;
  if (llama_base) {
    auto b = read_llama_kl(kl_in, base_size, o.kl_base);
    if (!b) return b.status();
    lbase = std::move(*b);
    if (lbase.n_ctx != uint32_t(n_ctx) || lbase.n_vocab != uint32_t(V))
      return Status::Error(o.kl_base + ": made by llama.cpp with -c " + std::to_string(lbase.n_ctx) + " and " +
                           std::to_string(lbase.n_vocab) + " tokens of vocabulary; this run has -c " +
                           std::to_string(n_ctx) + " and " + std::to_string(V));
    tokens = std::move(lbase.tokens);  // the text llama.cpp scored, as it tokenized it
  } else {
    tokens = model.tokenizer().encode(text, true);
  }
  int chunks = static_cast<int>(tokens.size() / n_ctx);
  if (o.max_chunks > 0) chunks = std::min(chunks, o.max_chunks);
  if (chunks < 1)
    return Status::Error("perplexity: the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                         std::to_string(n_ctx));
  const int first = n_ctx / 2, per_chunk = static_cast<int>(kl_scored_per_chunk(uint32_t(n_ctx)));
  const uint64_t thash = fnv1a(tokens.data(), tokens.size() * 4);
  // turbokv's KL base file (eval/kl_base.h): header, then the f32
  // log-probabilities of every scored position (exact, so a run compared with
  // its own base gives KLD 0).
  KlBaseHeader hdr;
  hdr.model = model.fingerprint();
  hdr.text = thash;
  hdr.n_ctx = uint32_t(n_ctx);
  hdr.n_vocab = uint32_t(V);
  hdr.chunks = uint32_t(chunks);
  hdr.per_chunk = uint32_t(per_chunk);
  if (!o.kl_base.empty()) {
    if (o.kl_write) {
      kl_out.open(o.kl_base, std::ios::binary);
      if (!kl_out) return Status::Error(o.kl_base + ": cannot create the KL base file");
      kl_out.write(reinterpret_cast<const char*>(&hdr), sizeof(hdr));
    } else if (!llama_base) {
      auto h = read_kl_header(kl_in, base_size, o.kl_base);
      if (!h) return h.status();
      if (h->model != hdr.model) return Status::Error(o.kl_base + ": made with another model");
      if (h->text != hdr.text) return Status::Error(o.kl_base + ": made with another text");
      if (h->n_ctx != hdr.n_ctx || h->n_vocab != hdr.n_vocab)
        return Status::Error(o.kl_base + ": made with -c " + std::to_string(h->n_ctx) + " and " + std::to_string(h->n_vocab) +
                             " tokens of vocabulary; this run has -c " + std::to_string(n_ctx) + " and " +
                             std::to_string(V));
      if (h->chunks < hdr.chunks)
        return Status::Error(o.kl_base + ": has " + std::to_string(h->chunks) + " chunks, this run needs " + std::to_string(chunks));
    }
  }
  KvCacheOptions co = o.cache;
  co.capacity = n_ctx;
  PerplexityResult r;
  double nll = 0, nll2 = 0;
  std::vector<double> kls, dps;
  double same = 0;
  std::vector<float> logits(size_t(n_ctx) * V), lp(V);
  std::vector<float> base(V);
  std::vector<uint16_t> packed(llama_base ? llama_kl_row_u16(uint32_t(V)) : 0);
  for (int ch = 0; ch < chunks; ++ch) {
    auto cache = KvCache::create(c.kv_shape(), co);
    if (!cache) return cache.status();
    std::vector<int32_t> batch(tokens.begin() + size_t(ch) * n_ctx, tokens.begin() + size_t(ch + 1) * n_ctx);
    if (model.tokenizer().bos() >= 0 && model.tokenizer().add_bos()) batch[0] = model.tokenizer().bos();
    for (int b0 = 0; b0 < n_ctx; b0 += o.batch) {
      const int nb = std::min(o.batch, n_ctx - b0);
      Status s = model.forward(batch.data() + b0, nb, b0, **cache, o.threads, logits.data() + size_t(b0) * V, true);
      if (!s.ok()) return s;
    }
    for (int i = first; i < n_ctx - 1; ++i) {
      const float* row = logits.data() + size_t(i) * V;
      const int32_t target = batch[i + 1];
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      const double lse = mx + std::log(sum);
      const double logp = row[target] - lse;
      nll -= logp;
      nll2 += logp * logp;
      if (kl_out.is_open() || kl_in.is_open()) {
        for (int v = 0; v < V; ++v) lp[v] = static_cast<float>(row[v] - lse);
        if (kl_out.is_open()) {
          kl_out.write(reinterpret_cast<const char*>(lp.data()), sizeof(float) * V);
        } else {
          const uint64_t position = uint64_t(ch) * per_chunk + (i - first);
          if (llama_base) {
            kl_in.read(reinterpret_cast<char*>(packed.data()), std::streamsize(packed.size() * 2));
            if (!kl_in) return Status::Error(o.kl_base + ": truncated (fewer scored positions than this run)");
            if (Status s = decode_llama_kl_row(packed.data(), uint32_t(V), base.data(), o.kl_base, position); !s.ok())
              return s;
          } else {
            kl_in.read(reinterpret_cast<char*>(base.data()), sizeof(float) * V);
            if (!kl_in) return Status::Error(o.kl_base + ": truncated (fewer scored positions than this run)");
            if (Status s = check_kl_row(base.data(), uint32_t(V), o.kl_base, position); !s.ok()) return s;
          }
          double kl = 0;
          int top_b = 0, top_n = 0;
          for (int v = 0; v < V; ++v) {
            const double lb = base[v];
            kl += std::exp(lb) * (lb - lp[v]);
            if (base[v] > base[top_b]) top_b = v;
            if (lp[v] > lp[top_n]) top_n = v;
          }
          kls.push_back(std::max(kl, 0.0));
          dps.push_back(std::exp(static_cast<double>(lp[target])) - std::exp(static_cast<double>(base[target])));
          same += top_b == top_n;
        }
      }
    }
    r.scored += per_chunk;
    r.running.push_back(std::exp(nll / r.scored));
    if (progress) progress(ch + 1, chunks, r.running.back());
  }
  r.chunks = chunks;
  const double n = static_cast<double>(r.scored);
  const double mean = nll / n;
  r.ppl = std::exp(mean);
  double var = nll2 / n - mean * mean;
  r.ppl_err = var > 0 ? std::sqrt(var / (n - 1)) * r.ppl : 0.0;
  if (!kls.empty()) {
    r.has_kl = true;
    KlStats& k = r.kl;
    const double m = kls.size();
    double s = 0, s2 = 0, d = 0, d2 = 0;
    for (double x : kls) { s += x; s2 += x * x; }
    for (double x : dps) { d += x; d2 += x * x; }
    k.mean = s / m;
    k.mean_err = m > 1 ? std::sqrt(std::max(0.0, s2 / m - k.mean * k.mean) / (m - 1)) : 0;
    k.dp_mean = d / m;
    k.dp_err = m > 1 ? std::sqrt(std::max(0.0, d2 / m - k.dp_mean * k.dp_mean) / (m - 1)) : 0;
    k.dp_rms = std::sqrt(d2 / m);
    k.same_top = 100.0 * same / m;
    std::sort(kls.begin(), kls.end());
    k.min = kls.front();
    k.max = kls.back();
    k.median = percentile(kls, 0.5);
    k.p999 = percentile(kls, 0.999);
    k.p99 = percentile(kls, 0.99);
    k.p95 = percentile(kls, 0.95);
    k.p90 = percentile(kls, 0.90);
    k.p10 = percentile(kls, 0.10);
    k.p05 = percentile(kls, 0.05);
    k.p01 = percentile(kls, 0.01);
    k.p001 = percentile(kls, 0.001);
  }
  return r;
}

}  // namespace tkv
