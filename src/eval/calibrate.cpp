#include "eval/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

#include "codec/calibrated.h"
#include "codec/format.h"

namespace tkv {
namespace {

// Rows of one (layer, K or V): [head][token][d].
struct Rows {
  std::vector<std::vector<float>> head;
};

HeadBasis isotropic(const HeadBasis& fit, uint64_t seed) {
  HeadBasis b = synthetic_head_basis(fit.d, seed);  // random orthonormal rows
  b.mean = fit.mean;
  double tr = 0;
  for (float v : fit.var) tr += v;
  b.var.assign(fit.d, static_cast<float>(tr / fit.d));
  return b;
}

// Relative MSE of rows (x - mean) coded with `format` on each head's basis
// (a plain format such as te8 uses only the mean, on the rotation a cache
// gives it: the default seed).
Expected<double> held_out_mse(const std::string& format, const std::vector<HeadBasis>& bases, const Rows& rows,
                              size_t t0, size_t t1, int d) {
  double err = 0, energy = 0;
  std::vector<float> x(d), y(d);
  std::vector<uint8_t> q(8 * d + 64);
  for (size_t h = 0; h < bases.size(); ++h) {
    auto c = is_calibrated_format(format) ? make_calibrated_codec(format, bases[h]) : make_codec(format, d);
    if (!c) return c.status();
    for (size_t t = t0; t < t1; ++t) {
      for (int i = 0; i < d; ++i) x[i] = rows.head[h][t * d + i] - bases[h].mean[i];
      Status s = (*c)->quantize(x.data(), 1, q.data());
      if (!s.ok()) return s;
      (*c)->dequantize(q.data(), 1, y.data());
      for (int i = 0; i < d; ++i) {
        err += std::pow(double(x[i]) - y[i], 2);
        energy += double(x[i]) * x[i];
      }
    }
  }
  return energy > 0 ? err / energy : 0.0;
}

// Log-softmax of every position of a chunk.
void log_softmax_rows(const float* logits, int n, int V, std::vector<float>& out) {
  out.resize(size_t(n) * V);
  for (int i = 0; i < n; ++i) {
    const float* r = logits + size_t(i) * V;
    const float mx = *std::max_element(r, r + V);
    double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(double(r[v]) - mx);
    const double lse = mx + std::log(s);
    for (int v = 0; v < V; ++v) out[size_t(i) * V + v] = static_cast<float>(r[v] - lse);
  }
}

std::string protect_label(const ProtectChoice& p) {
  return std::to_string(p.sinks) + "," + std::to_string(p.recent) + "," + p.type;
}

// Bits per value the protected rows add at ctx tokens, as the cache counts
// them (its sinks' blocks and recent ring over its capacity).
Expected<double> protected_bits(const KvShape& shape, const ProtectChoice& p, int ctx) {
  if (p.sinks == 0 && p.recent == 0) return 0.0;
  KvCacheOptions co;
  co.type_k = co.type_v = "f16";
  co.capacity = ctx;
  auto plain = KvCache::create(shape, co);
  if (!plain) return plain.status();
  co.protect_sinks = p.sinks;
  co.protect_recent = p.recent;
  co.protect_type = p.type;
  auto prot = KvCache::create(shape, co);
  if (!prot) return Status::Error("calibrate: protected tokens " + protect_label(p) + ": " + prot.error());
  return ((*prot)->k_bits_per_value() + (*prot)->v_bits_per_value() - (*plain)->k_bits_per_value() -
          (*plain)->v_bits_per_value()) / 2;
}

// The widths (one per entry) with the least total KLD whose average is at
// most `budget`, exactly under additivity: a dynamic programme over entries,
// widths in sixteenths of a bit (the tqc widths are half bits; te8's 2 + 16/d
// is a multiple of 1/16 for d a multiple of 8 up to 256). kld[e * W + w].
Expected<std::pair<std::vector<size_t>, double>> choose_widths(const std::vector<double>& kld,
                                                                const std::vector<double>& widths, int entries,
                                                                double budget) {
  const size_t W = widths.size();
  const int units_budget = static_cast<int>(std::floor(budget * 16 * entries + 1e-9));
  if (units_budget < 0) return Status::Error("no widths");
  std::vector<int> units(W);
  for (size_t wi = 0; wi < W; ++wi) units[wi] = static_cast<int>(std::lround(widths[wi] * 16));
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(entries + 1, std::vector<double>(units_budget + 1, inf));
  std::vector<std::vector<int>> arg(entries + 1, std::vector<int>(units_budget + 1, -1));
  best[0][0] = 0;
  for (int e = 0; e < entries; ++e)
    for (int u = 0; u <= units_budget; ++u) {
      if (best[e][u] == inf) continue;
      for (size_t wi = 0; wi < W; ++wi) {
        const int nu = u + units[wi];
        if (nu > units_budget) continue;
        const double v = best[e][u] + kld[e * W + wi];
        if (v < best[e + 1][nu]) {
          best[e + 1][nu] = v;
          arg[e + 1][nu] = static_cast<int>(wi);
        }
      }
    }
  int bu = -1;
  for (int u = 0; u <= units_budget; ++u)
    if (best[entries][u] < inf && (bu < 0 || best[entries][u] < best[entries][bu])) bu = u;
  if (bu < 0) return Status::Error("no widths");
  std::pair<std::vector<size_t>, double> r{std::vector<size_t>(entries), best[entries][bu]};
  for (int e = entries; e > 0; --e) {
    r.first[e - 1] = static_cast<size_t>(arg[e][bu]);
    bu -= units[r.first[e - 1]];
  }
  return r;
}

}  // namespace

Expected<KvPolicy> calibrate(const Model& model, const std::string& text, const CalibrateOptions& o,
                             CalibrateReport* report, const std::function<bool(const std::string&)>& progress) {
  const ModelConfig& cfg = model.config();
  const KvShape shape = cfg.kv_shape();  // the layers with a KV cache
  const int L = shape.n_layer, H = cfg.n_head_kv, d = cfg.head_dim, V = cfg.n_vocab, n_ctx = o.n_ctx;
  auto say = [&](const std::string& m) { return !progress || progress(m); };
  const Status stopped = Status::Error("calibrate: stopped by the progress callback");
  if (n_ctx < 8) return Status::Error("calibrate: -c must be at least 8");
  if (o.budget != 0 && !(o.budget >= 1.0 && o.budget <= 8.0))
    return Status::Error("calibrate: --budget must be in [1, 8] bits per value");
  if (o.protect_auto && o.budget <= 0) return Status::Error("calibrate: --protect auto needs a --budget");
  std::vector<int32_t> tokens = model.tokenizer().encode(text, true);
  const int chunks = static_cast<int>(std::min<size_t>(tokens.size(), size_t(std::max(o.tokens, n_ctx))) / n_ctx);
  if (chunks < 1)
    return Status::Error("calibrate: the text has " + std::to_string(tokens.size()) + " tokens, fewer than one chunk of " +
                         std::to_string(n_ctx));
  auto chunk_tokens = [&](int ch) {
    std::vector<int32_t> b(tokens.begin() + size_t(ch) * n_ctx, tokens.begin() + size_t(ch + 1) * n_ctx);
    if (model.tokenizer().bos() >= 0 && model.tokenizer().add_bos()) b[0] = model.tokenizer().bos();
    return b;
  };

  // 1. Collect rows with an f32 cache.
  const int kld_chunks = o.budget > 0 ? std::clamp(o.kld_tokens / n_ctx, 1, chunks) : 0;
  std::vector<Rows> krows(L), vrows(L);
  for (int l = 0; l < L; ++l) {
    krows[l].head.resize(H);
    vrows[l].head.resize(H);
  }
  std::vector<float> logits(size_t(n_ctx) * V);
  KvCacheOptions f32;
  f32.type_k = f32.type_v = "f32";
  f32.capacity = n_ctx;
  for (int ch = 0; ch < chunks; ++ch) {
    auto cache = KvCache::create(shape, f32);
    if (!cache) return cache.status();
    const auto batch = chunk_tokens(ch);
    auto observe = [&](int layer, int, int n, const float* k, const float* v) {
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h) {
          const float* kr = k + (size_t(t) * H + h) * d;
          const float* vr = v + (size_t(t) * H + h) * d;
          krows[layer].head[h].insert(krows[layer].head[h].end(), kr, kr + d);
          vrows[layer].head[h].insert(vrows[layer].head[h].end(), vr, vr + d);
        }
    };
    Status s = model.forward(batch.data(), n_ctx, 0, **cache, o.threads, logits.data(), false, observe);
    if (!s.ok()) return s;
    if (!say("collected chunk " + std::to_string(ch + 1) + "/" + std::to_string(chunks))) return stopped;
  }
  const size_t n_rows = size_t(chunks) * n_ctx;
  const size_t n_fit = std::max<size_t>(2, n_rows * 3 / 4);  // last quarter held out for choices

  // 2. Bases per (layer, K/V, head): calibrated and isotropic, fitted on the
  //    first three quarters; refitted on everything for the policy.
  KvPolicy pol;
  pol.model = model.fingerprint();
  pol.n_layer = L;
  pol.n_kv_heads = H;
  pol.head_dim = d;
  pol.budget = o.budget;
  pol.k.resize(L);
  pol.v.resize(L);
  struct Choice { std::vector<HeadBasis> cal, iso, cal_all, iso_all; };
  std::vector<Choice> choice(2 * L);
  for (int l = 0; l < L; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const Rows& R = kv ? vrows[l] : krows[l];
      Choice& c = choice[2 * l + kv];
      for (int h = 0; h < H; ++h) {
        auto part = fit_head_basis(R.head[h].data(), n_fit, d);
        auto all = fit_head_basis(R.head[h].data(), n_rows, d);
        if (!part || !all) return Status::Error("calibrate: layer " + std::to_string(l) + ": " +
                                                (part ? all.error() : part.error()));
        const uint64_t seed = o.seed + 1000003ull * (2 * l + kv) + h;
        c.iso.push_back(isotropic(*part, seed));
        c.iso_all.push_back(isotropic(*all, seed));
        c.cal.push_back(std::move(*part));
        c.cal_all.push_back(std::move(*all));
      }
    }
  if (!say("fitted bases for " + std::to_string(L) + " layers x " + std::to_string(H) + " KV heads")) return stopped;

  // Candidate stored widths (bits per value, scale included).
  auto fmt_of = [&](double w) { return calibrated_format_name(w - 16.0 / d); };
  std::vector<double> widths;
  if (o.budget > 0) {  // the candidates this head dim can hold in whole bytes
    for (double w : {1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 8.0})
      if (w - 16.0 / d > 0.2 && calibrated_bits(fmt_of(w), d).ok()) widths.push_back(w);
    if (widths.empty())
      return Status::Error("calibrate: no width from 1.5 to 8 bits per value fits head dim " + std::to_string(d) +
                           " (calibrated rows need a multiple of 8)");
  } else {
    if (!(o.bits - 16.0 / d > 0.0))
      return Status::Error("calibrate: " + std::to_string(o.bits) + " bits per value leave nothing after the 16-bit row scale at head dim " +
                           std::to_string(d));
    auto b = calibrated_bits(fmt_of(o.bits), d);
    if (!b) return Status::Error("calibrate: " + std::to_string(o.bits) + " bits per value: " + b.error());
    widths.push_back(o.bits);
  }
  std::vector<std::string> formats;
  for (double w : widths) formats.push_back(fmt_of(w));
  if (o.budget > 0 && o.trellis) {  // ttc beside each tqc width of at most 3 coded bits
    const size_t n = widths.size();
    for (size_t wi = 0; wi < n; ++wi)
      if (widths[wi] - 16.0 / d <= 3.0 + 1e-9) {
        widths.push_back(widths[wi]);
        formats.push_back("ttc" + formats[wi].substr(3));
      }
  }
  if (o.budget > 0 && o.lattice) {
    if (d % 8 != 0) return Status::Error("calibrate: te8 needs a head dim that is a multiple of 8, not " + std::to_string(d));
    widths.push_back(2.0 + 16.0 / d);
    formats.push_back("te8");
  }
  CalibrateReport rep;
  rep.widths = widths;
  rep.formats = formats;
  // use_cal[e][w]: calibrated basis better on held-out rows at width w.
  std::vector<std::vector<bool>> use_cal(2 * L, std::vector<bool>(widths.size()));
  std::vector<std::vector<std::pair<double, double>>> mses(2 * L);
  for (int e = 0; e < 2 * L; ++e) {
    const Rows& R = (e % 2) ? vrows[e / 2] : krows[e / 2];
    CalibrateReport::Entry en;
    en.layer = e / 2;
    en.is_v = e % 2;
    for (size_t wi = 0; wi < widths.size(); ++wi) {
      // (A plain format reads only the means, the same in both: one run.)
      auto mc = held_out_mse(formats[wi], choice[e].cal, R, n_fit, n_rows, d);
      auto mi = is_calibrated_format(formats[wi]) ? held_out_mse(formats[wi], choice[e].iso, R, n_fit, n_rows, d) : mc;
      if (!mc || !mi) return mc ? mi.status() : mc.status();
      use_cal[e][wi] = *mc <= *mi;
      mses[e].push_back({*mc, *mi});
    }
    rep.entries.push_back(en);
  }

  // Mean KLD against the f32 cache of each policy (with its protection) over
  // the first kld_chunks chunks, chunk by chunk: one chunk's log-probabilities
  // in memory, whatever the vocabulary.
  struct Probe {
    std::shared_ptr<const KvPolicy> policy;
    ProtectChoice protect;
  };
  auto measure = [&](const std::vector<Probe>& ps, const std::string& what) -> Expected<std::vector<double>> {
    std::vector<double> kl(ps.size(), 0.0);
    size_t n = 0;
    std::vector<float> base, lp;
    for (int ch = 0; ch < kld_chunks; ++ch) {
      const auto batch = chunk_tokens(ch);
      {
        auto cache = KvCache::create(shape, f32);
        if (!cache) return cache.status();
        Status s = model.forward(batch.data(), n_ctx, 0, **cache, o.threads, logits.data(), true);
        if (!s.ok()) return s;
        log_softmax_rows(logits.data(), n_ctx, V, base);
      }
      for (size_t pi = 0; pi < ps.size(); ++pi) {
        KvCacheOptions co;
        co.capacity = n_ctx;
        co.policy = ps[pi].policy;
        co.protect_sinks = ps[pi].protect.sinks;
        co.protect_recent = ps[pi].protect.recent;
        co.protect_type = ps[pi].protect.type;
        auto cache = KvCache::create(shape, co);
        if (!cache) return cache.status();
        Status s = model.forward(batch.data(), n_ctx, 0, **cache, o.threads, logits.data(), true);
        if (!s.ok()) return s;
        log_softmax_rows(logits.data(), n_ctx, V, lp);
        double sum = 0;
        for (int i = 0; i < n_ctx - 1; ++i) {
          double k = 0;
          for (int v = 0; v < V; ++v) {
            const size_t at = size_t(i) * V + v;
            k += std::exp(double(base[at])) * (double(base[at]) - lp[at]);
          }
          sum += k;
        }
        kl[pi] += sum;
      }
      n += static_cast<size_t>(n_ctx - 1);
      if (!say(what + " measured on chunk " + std::to_string(ch + 1) + "/" + std::to_string(kld_chunks))) return stopped;
    }
    for (double& k : kl) k /= double(n);
    return kl;
  };

  auto set_entry = [&](KvPolicy& p, int e, size_t wi) {
    KvPolicyEntry& dst = (e % 2) ? p.v[e / 2] : p.k[e / 2];
    dst.format = formats[wi];
    dst.heads = use_cal[e][wi] ? choice[e].cal_all : choice[e].iso_all;
  };
  std::vector<size_t> pick(2 * L, 0);
  if (o.budget > 0) {
    std::vector<ProtectChoice> trials;
    if (o.protect_auto) trials.assign(std::begin(kProtectCandidates), std::end(kProtectCandidates));
    else trials.push_back({o.protect_sinks, o.protect_recent, o.protect_type});
    const int ctx = o.budget_ctx > 0 ? o.budget_ctx : n_ctx;
    std::vector<std::vector<double>> sens(trials.size());
    std::vector<std::vector<size_t>> picks(trials.size());
    std::vector<Probe> wholes;  // each fitting trial's policy, measured together below
    std::vector<int> whole_trial;
    for (size_t ti = 0; ti < trials.size(); ++ti) {
      ProtectChoice& pt = trials[ti];
      auto extra = protected_bits(shape, pt, ctx);
      if (!extra) return extra.status();
      pt.bits = *extra;
      const double share = o.budget - pt.bits;
      pt.fits = share >= *std::min_element(widths.begin(), widths.end()) - 1e-9;
      if (!pt.fits) continue;
      const std::string what = pt.recent + pt.sinks > 0 ? " (protected " + protect_label(pt) + ")" : "";
      // 3. Sensitivities: KLD against the f32 baseline with one entry coded.
      KvPolicy probe = pol;
      for (int l = 0; l < L; ++l) {
        probe.k[l] = {"f32", choice[2 * l].cal_all};
        probe.v[l] = {"f32", choice[2 * l + 1].cal_all};
      }
      const size_t W = widths.size();
      std::vector<Probe> probes(2 * L * W);
      for (int e = 0; e < 2 * L; ++e)
        for (size_t wi = 0; wi < W; ++wi) {
          KvPolicy p = probe;
          set_entry(p, e, wi);
          probes[e * W + wi] = {std::make_shared<const KvPolicy>(std::move(p)), pt};
        }
      auto kl = measure(probes, "sensitivities" + what);
      if (!kl) return kl.status();
      sens[ti] = std::move(*kl);
      auto dp = choose_widths(sens[ti], widths, 2 * L, share);
      if (!dp) return Status::Error("calibrate: no widths meet a budget of " + std::to_string(o.budget) + " bits" + what);
      picks[ti] = std::move(dp->first);
      pt.predicted_kld = dp->second;
      KvPolicy whole = pol;
      for (int e = 0; e < 2 * L; ++e) set_entry(whole, e, picks[ti][e]);
      wholes.push_back({std::make_shared<const KvPolicy>(std::move(whole)), pt});
      whole_trial.push_back(static_cast<int>(ti));
    }
    if (wholes.empty())
      return Status::Error("calibrate: a budget of " + std::to_string(o.budget) + " bits leaves no room for the " +
                           "narrowest width beside the protected tokens' rows (" + std::to_string(trials[0].bits) +
                           " bits at " + std::to_string(ctx) + " tokens)");
    // One trial: its widths. Several: each whole policy measured (the sums of
    // sensitivities under different protections are not comparable), the
    // least KLD kept.
    int best_trial = whole_trial[0];
    if (trials.size() > 1) {
      auto m = measure(wholes, "the policies");
      if (!m) return m.status();
      for (size_t i = 0; i < wholes.size(); ++i) {
        trials[whole_trial[i]].measured_kld = (*m)[i];
        if ((*m)[i] < trials[best_trial].measured_kld) best_trial = whole_trial[i];
      }
    }
    const ProtectChoice& chosen = trials[best_trial];
    pick = picks[best_trial];
    rep.total_kld = chosen.predicted_kld;
    const size_t W = widths.size();
    for (int e = 0; e < 2 * L; ++e)
      rep.entries[e].kld.assign(sens[best_trial].begin() + e * W, sens[best_trial].begin() + (e + 1) * W);
    pol.protect_sinks = chosen.sinks;
    pol.protect_recent = chosen.recent;
    pol.protect_type = chosen.type;
    rep.protect_trials = trials;
    rep.protect_chosen = best_trial;
  } else {  // no budget: the protection is recorded, not counted
    pol.protect_sinks = o.protect_sinks;
    pol.protect_recent = o.protect_recent;
    pol.protect_type = o.protect_type;
  }
  for (int e = 0; e < 2 * L; ++e) {
    set_entry(pol, e, pick[e]);
    rep.entries[e].bits = widths[pick[e]];
    rep.entries[e].format = formats[pick[e]];
    rep.entries[e].calibrated = use_cal[e][pick[e]];
    rep.entries[e].mse_calibrated = mses[e][pick[e]].first;
    rep.entries[e].mse_isotropic = mses[e][pick[e]].second;
  }
  char src[160];
  std::snprintf(src, sizeof src, "%d chunks of %d tokens, budget %.3g, seed %llu%s", chunks, n_ctx, o.budget,
                static_cast<unsigned long long>(o.seed),
                pol.protect_recent + pol.protect_sinks > 0
                    ? (", protected " + protect_label({pol.protect_sinks, pol.protect_recent, pol.protect_type})).c_str()
                    : "");
  pol.source = src;
  if (report) *report = std::move(rep);
  return pol;
}

}  // namespace tkv
