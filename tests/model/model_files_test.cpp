// Issue 32, what a model file may hold: strict tensor accounting (every
// tensor used or on the runtime's list of knowingly skipped tensors), Llama
// 3's RoPE factors, YaRN, split files. Float64 references here take their
// configuration from this test, never from the engine's ModelConfig.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "eval/perplexity.h"
#include "util/hash.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "gguf_edit.h"
#include "shared_data.h"
#include "test_cli.h"
#include "test_models.h"
#include "turbokv.h"

namespace tkv {
namespace model_files {

std::string tmp(const std::string& name) {
  return testing::TempDir() + std::to_string(getpid()) + "_tkv_files_" + name;
}

// ---------------------------------------------------------------- 1. tensor accounting

TEST(TensorAccounting, AnUnknownTensorIsRefusedByName) {
  const std::string base = small_model(tmp("base.gguf")), odd = tmp("odd.gguf");
  auto f = gguf::File::open(base);
  ASSERT_TRUE(f.ok()) << f.error();
  {  // the copy alone loads: what refuses the variant is the one added tensor
    gguf::Writer w;
    copy_gguf(**f, w);
    ASSERT_TRUE(w.write(odd).ok());
    auto m = Model::load(odd);
    ASSERT_TRUE(m.ok()) << m.error();
  }
  gguf::Writer w;
  copy_gguf(**f, w);
  const std::vector<float> extra(64, 1.0f);
  ASSERT_TRUE(w.add_tensor("blk.1.attn_mystery.weight", {64}, 0, extra.data(), 256).ok());
  ASSERT_TRUE(w.write(odd).ok());
  auto m = Model::load(odd);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'blk.1.attn_mystery.weight'"), std::string::npos) << m.error();
  EXPECT_NE(m.error().find("1 tensor is not used"), std::string::npos) << m.error();
  std::remove(base.c_str());
  std::remove(odd.c_str());
}

// qwen35's multi-token-prediction blocks (block_count includes them) are on
// the list: a file with one loads; the same tensor in a block that runs does not.
TEST(TensorAccounting, MultiTokenPredictionBlocksAreKnowinglySkipped) {
  GenModelOptions o;
  o.arch = "qwen35";
  o.layers = 4;
  const std::string base = tmp("q35.gguf"), mtp = tmp("q35_mtp.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, base).ok());
  auto f = gguf::File::open(base);
  ASSERT_TRUE(f.ok()) << f.error();
  const std::vector<float> row(64, 0.5f);
  for (const char* name : {"blk.4.nextn.eh_proj.weight", "blk.3.nextn.eh_proj.weight"}) {
    gguf::Writer w;
    copy_gguf(**f, w, [](const std::string& k) { return k != "qwen35.block_count"; });
    w.add_u32("qwen35.block_count", 5);
    w.add_u32("qwen35.nextn_predict_layers", 1);
    ASSERT_TRUE(w.add_tensor(name, {64}, 0, row.data(), 256).ok());
    ASSERT_TRUE(w.write(mtp).ok());
    auto m = Model::load(mtp);
    if (std::string(name).rfind("blk.4", 0) == 0) {
      ASSERT_TRUE(m.ok()) << m.error();
      EXPECT_EQ((*m)->config().n_layer, 4);
    } else {
      ASSERT_FALSE(m.ok()) << "a tensor of a block that runs, read by no loader";
      EXPECT_NE(m.error().find(name), std::string::npos) << m.error();
    }
  }
  std::remove(base.c_str());
  std::remove(mtp.c_str());
}

TEST(TensorAccounting, EverySharedFileAndEveryGenModelArchitectureLoads) {
  for (const std::string arch :
       {"llama", "qwen2", "qwen3", "phi3", "qwen3moe", "gemma3", "qwen35", "qwen35moe", "smollm3", "granite", "olmo2",
        "gpt-oss"}) {
    GenModelOptions o;
    o.arch = arch;
    o.layers = 4;  // qwen35: three Gated DeltaNet layers and one attention layer
    if (arch == "phi3") o.rope_orig_ctx = 256;
    const std::string path = tmp("arch_" + arch + ".gguf");
    ASSERT_TRUE(generate_model(o, nullptr, path).ok()) << arch;
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << arch << ": " << m.error();
    std::remove(path.c_str());
  }
  TKV_NEED_SHARED("models/families/llama.gguf", "models/ref-5m/ref-5m-f16.gguf", "models/ref-5m/llama-quantized");
  std::vector<std::string> files;
  for (const char* dir : {"models/families", "models/ref-5m", "models/ref-5m/llama-quantized"})
    for (const auto& e : std::filesystem::directory_iterator(shared_path(dir)))
      if (e.path().extension() == ".gguf") files.push_back(e.path().string());
  EXPECT_GE(files.size(), 19u);
  for (const std::string& path : files) {
    auto m = Model::load(path);
    EXPECT_TRUE(m.ok()) << path << ": " << m.error();
  }
}


// ---------------------------------------------------------------- a float64 llama

using Vec = std::vector<double>;

// The configuration the reference runs: written by the test, never read
// from the engine's ModelConfig.
struct RefConfig {
  int layers = 2, dim = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 128;
  double eps = 1e-5, base = 10000.0;
  bool neox = false;       // llama: adjacent pairs
  std::vector<double> ff;  // per rotated pair: the frequency is divided by it (empty: none)
  double scale = 1.0;      // rope.scaling.factor (positions interpolated by 1/scale)
  // YaRN: ext_factor != 0 mixes interpolated and extrapolated angles.
  double ext = 0.0, beta_fast = 32.0, beta_slow = 1.0, mscale = 1.0;
  int orig_ctx = 0;
  // SmolLM3: layer l has no RoPE when (l + 1) % no_rope_period == 0 (0: all rotate).
  int no_rope_period = 0;
  // Granite's scales (0: none): embeddings times, outputs before the residual
  // add times, the softmax scale, logits divided by.
  double embd_scale = 0, residual_scale = 0, attn_scale = 0, logit_scale = 0;
  // OLMo 2: no pre-norms, Q/K normed over all heads, post norms.
  bool olmo2 = false;
  // gpt-oss: Q/K/V/output biases, a sink per head, a window on even layers,
  // experts with biases, top-k then softmax, clamped SwiGLU.
  bool gptoss = false;
  int window = 0, experts = 0, experts_used = 0;
};

struct LlamaRef {
  const gguf::File& f;
  RefConfig c;
  Vec mat(const std::string& name) const {
    const gguf::Tensor* t = f.tensor(name);
    EXPECT_NE(t, nullptr) << name;
    gguf::Tensor flat = *t;  // experts [cols, rows, n] as one [cols, rows * n] matrix
    if (flat.dims.size() == 3) flat.dims = {t->dims[0], t->dims[1] * t->dims[2]};
    auto w = *matrix_from(flat, "test");
    std::vector<float> row(w.cols);
    Vec out(size_t(w.rows) * w.cols);
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t k = 0; k < w.cols; ++k) out[size_t(r) * w.cols + k] = row[k];
    }
    return out;
  }
  static Vec mv(const Vec& w, const Vec& x) {
    Vec y(w.size() / x.size(), 0.0);
    for (size_t r = 0; r < y.size(); ++r)
      for (size_t k = 0; k < x.size(); ++k) y[r] += w[r * x.size() + k] * x[k];
    return y;
  }
  Vec rms(const Vec& x, const Vec& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + c.eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * g[i];
    return y;
  }
  // Pair i's angle at position p and the factor on cos and sin (YaRN as the
  // YaRN paper and ggml describe it: the ramp between the pairs whose
  // wavelength fits orig_ctx / beta_fast and orig_ctx / beta_slow times).
  double angle(int i, int p, double* ms) const {
    const int d = c.head_dim;
    double extrap = p * std::pow(c.base, -2.0 * i / d);
    if (!c.ff.empty()) extrap /= c.ff[i];
    const double interp = extrap / c.scale;
    *ms = c.mscale;
    if (c.ext == 0.0) return interp;
    auto corr = [&](double beta) { return d * std::log(c.orig_ctx / (beta * 2 * M_PI)) / (2 * std::log(c.base)); };
    const double lo = std::max(0.0, std::floor(corr(c.beta_fast))), hi = std::min(d - 1.0, std::ceil(corr(c.beta_slow)));
    const double ramp = 1.0 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
    *ms *= 1.0 + 0.1 * std::log(c.scale);
    return interp * (1.0 - ramp * c.ext) + extrap * ramp * c.ext;
  }
  void rope(double* v, int p) const {
    const int d = c.head_dim;
    for (int i = 0; i < d / 2; ++i) {
      double ms = 1.0;
      const double th = angle(i, p, &ms);
      const int a = c.neox ? i : 2 * i, b = c.neox ? i + d / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = ms * (x0 * std::cos(th) - x1 * std::sin(th));
      v[b] = ms * (x0 * std::sin(th) + x1 * std::cos(th));
    }
  }
  // gpt-oss's experts: router logits plus bias, the top k by logit, weights
  // a softmax over those k; each expert's gate/up/down with their biases and
  // SwiGLU clamped at 7 with alpha 1.702.
  Vec moe(const std::string& p, const Vec& h) const {
    const int X = c.experts, F = c.ffn, E = c.dim;
    Vec lg = mv(mat(p + "ffn_gate_inp.weight"), h);
    const Vec rb = mat(p + "ffn_gate_inp.bias");
    for (int e = 0; e < X; ++e) lg[e] += rb[e];
    std::vector<int> idx(X);
    for (int e = 0; e < X; ++e) idx[e] = e;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return lg[a] > lg[b]; });
    double z = 0;
    for (int k = 0; k < c.experts_used; ++k) z += std::exp(lg[idx[k]] - lg[idx[0]]);
    const Vec G = mat(p + "ffn_gate_exps.weight"), U = mat(p + "ffn_up_exps.weight"), D = mat(p + "ffn_down_exps.weight");
    const Vec gb = mat(p + "ffn_gate_exps.bias"), ub = mat(p + "ffn_up_exps.bias"), db = mat(p + "ffn_down_exps.bias");
    Vec y(E, 0.0);
    for (int k = 0; k < c.experts_used; ++k) {
      const int e = idx[k];
      const double w = std::exp(lg[e] - lg[idx[0]]) / z;
      Vec a(F);
      for (int i = 0; i < F; ++i) {
        double g = gb[size_t(e) * F + i], u = ub[size_t(e) * F + i];
        for (int j = 0; j < E; ++j) {
          g += G[(size_t(e) * F + i) * E + j] * h[j];
          u += U[(size_t(e) * F + i) * E + j] * h[j];
        }
        const double xg = std::min(g, 7.0), yu = std::clamp(u, -7.0, 7.0);
        a[i] = xg / (1.0 + std::exp(-1.702 * xg)) * (yu + 1.0);
      }
      for (int i = 0; i < E; ++i) {
        double d = db[size_t(e) * E + i];
        for (int j = 0; j < F; ++j) d += D[(size_t(e) * E + i) * F + j] * a[j];
        y[i] += w * d;
      }
    }
    return y;
  }
  // Logits at every position of toks.
  std::vector<Vec> run(const std::vector<int32_t>& toks) const {
    const int T = static_cast<int>(toks.size()), E = c.dim, hd = c.head_dim;
    const Vec emb = mat("token_embd.weight");
    std::vector<Vec> x(T);
    for (int t = 0; t < T; ++t) {
      x[t] = Vec(emb.begin() + size_t(toks[t]) * E, emb.begin() + size_t(toks[t] + 1) * E);
      if (c.embd_scale > 0)
        for (double& v : x[t]) v *= c.embd_scale;
    }
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const Vec wq = mat(p + "attn_q.weight"), wk = mat(p + "attn_k.weight"), wv = mat(p + "attn_v.weight"),
                wo = mat(p + "attn_output.weight");
      Vec wg, wu, wd;
      if (!c.gptoss) {
        wg = mat(p + "ffn_gate.weight");
        wu = mat(p + "ffn_up.weight");
        wd = mat(p + "ffn_down.weight");
      }
      Vec an, fn, qn, kn, pa, pf;
      if (c.olmo2) {
        qn = mat(p + "attn_q_norm.weight");
        kn = mat(p + "attn_k_norm.weight");
        pa = mat(p + "post_attention_norm.weight");
        pf = mat(p + "post_ffw_norm.weight");
      } else {
        an = mat(p + "attn_norm.weight");
        fn = mat(p + (c.gptoss ? "post_attention_norm.weight" : "ffn_norm.weight"));
      }
      Vec bq, bk, bv, bo, sinks;
      if (c.gptoss) {
        bq = mat(p + "attn_q.bias");
        bk = mat(p + "attn_k.bias");
        bv = mat(p + "attn_v.bias");
        bo = mat(p + "attn_output.bias");
        sinks = mat(p + "attn_sinks.weight");
      }
      auto plus = [](Vec a, const Vec& b) {
        for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
        return a;
      };
      const int W = c.gptoss && l % 2 == 0 ? c.window : 0;
      const bool rotate = c.no_rope_period == 0 || (l + 1) % c.no_rope_period != 0;
      std::vector<Vec> Q, K, V;
      for (int t = 0; t < T; ++t) {
        const Vec h = c.olmo2 ? x[t] : rms(x[t], an);
        Vec q = plus(mv(wq, h), bq), k = plus(mv(wk, h), bk);
        if (c.olmo2) {  // one norm over each whole vector
          q = rms(q, qn);
          k = rms(k, kn);
        }
        for (int hh = 0; hh < c.heads && rotate; ++hh) rope(&q[size_t(hh) * hd], t);
        for (int hh = 0; hh < c.kv_heads && rotate; ++hh) rope(&k[size_t(hh) * hd], t);
        Q.push_back(q);
        K.push_back(k);
        V.push_back(plus(mv(wv, h), bv));
      }
      for (int t = 0; t < T; ++t) {
        Vec att(size_t(c.heads) * hd, 0.0);
        for (int hh = 0; hh < c.heads; ++hh) {
          const int kv = hh / (c.heads / c.kv_heads);
          Vec s(t + 1, -1e300);
          const int j0 = W > 0 ? std::max(0, t - W + 1) : 0;
          double mx = sinks.empty() ? -1e300 : sinks[hh], sum = 0;
          for (int j = j0; j <= t; ++j) {
            double dot = 0;
            for (int i = 0; i < hd; ++i) dot += Q[t][size_t(hh) * hd + i] * K[j][size_t(kv) * hd + i];
            s[j] = dot * (c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(double(hd)));
            mx = std::max(mx, s[j]);
          }
          for (double& v : s) sum += (v = std::exp(v - mx));
          if (!sinks.empty()) sum += std::exp(sinks[hh] - mx);  // the sink: in the denominator, no value
          for (int j = j0; j <= t; ++j)
            for (int i = 0; i < hd; ++i) att[size_t(hh) * hd + i] += s[j] / sum * V[j][size_t(kv) * hd + i];
        }
        Vec o = plus(mv(wo, att), bo);
        if (c.olmo2) o = rms(o, pa);
        const double rs = c.residual_scale > 0 ? c.residual_scale : 1.0;
        for (int i = 0; i < E; ++i) x[t][i] += rs * o[i];
        const Vec h = c.olmo2 ? x[t] : rms(x[t], fn);
        Vec dn;
        if (c.gptoss) {
          dn = moe(p, h);
        } else {
          Vec g = mv(wg, h);
          const Vec u = mv(wu, h);
          for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
          dn = mv(wd, g);
        }
        if (c.olmo2) dn = rms(dn, pf);
        for (int i = 0; i < E; ++i) x[t][i] += rs * dn[i];
      }
    }
    const Vec on = mat("output_norm.weight"), out = mat("output.weight");
    std::vector<Vec> logits;
    for (int t = 0; t < T; ++t) {
      logits.push_back(mv(out, rms(x[t], on)));
      if (c.logit_scale > 0)
        for (double& v : logits.back()) v /= c.logit_scale;
    }
    return logits;
  }
};

// The worst relative error over positions of two runs' logits.
double worst_rel(const std::vector<Vec>& got, const std::vector<Vec>& want) {
  double worst = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    double e = 0, n = 0;
    for (size_t i = 0; i < want[t].size(); ++i) {
      e += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
      n += want[t][i] * want[t][i];
    }
    worst = std::max(worst, std::sqrt(e / n));
  }
  return worst;
}

// The engine's logits (f32 cache) over toks: a prompt of `prompt` tokens at
// once, then one token at a time.
std::vector<Vec> engine_logits(const Model& m, const std::vector<int32_t>& toks, int prompt) {
  const ModelConfig& c = m.config();
  KvCacheOptions co;
  co.type_k = co.type_v = "f32";
  co.capacity = static_cast<int>(toks.size()) + 8;
  auto cache = KvCache::create(c.kv_shape(), co);
  EXPECT_TRUE(cache.ok()) << cache.error();
  std::vector<Vec> out;
  std::vector<float> lg(size_t(prompt) * c.n_vocab);
  Status s = m.forward(toks.data(), prompt, 0, **cache, 2, lg.data(), true);
  EXPECT_TRUE(s.ok()) << s.message();
  for (int t = 0; t < prompt; ++t) out.emplace_back(lg.begin() + size_t(t) * c.n_vocab, lg.begin() + size_t(t + 1) * c.n_vocab);
  for (size_t t = prompt; t < toks.size(); ++t) {
    s = m.forward(&toks[t], 1, static_cast<int>(t), **cache, 1, lg.data());
    EXPECT_TRUE(s.ok()) << s.message();
    out.emplace_back(lg.begin(), lg.begin() + c.n_vocab);
  }
  return out;
}

std::vector<int32_t> test_tokens(int T, int vocab) {
  std::vector<int32_t> toks(T);
  for (int i = 0; i < T; ++i) toks[i] = (i * 37 + 11) % vocab;
  return toks;
}

// Llama 3's factors for one rotated pair, from the converter's description:
// by wavelength, 1 above ctx / high, `factor` below ctx / low, smooth between.
std::vector<double> llama3_factors(int dims, double base, double ctx) {
  std::vector<double> ff;
  for (int i = 0; i < dims / 2; ++i) {
    const double wl = 2 * M_PI * std::pow(base, 2.0 * i / dims);
    if (wl < ctx / 4) ff.push_back(1.0);
    else if (wl > ctx / 1) ff.push_back(8.0);
    else {
      const double sm = (ctx / wl - 1.0) / 3.0;
      ff.push_back(1.0 / ((1 - sm) / 8.0 + sm));
    }
  }
  return ff;
}

// ---------------------------------------------------------------- 2. Llama 3 RoPE factors

TEST(RopeFactors, Llama3FactorsMatchFloat64Reference) {
  GenModelOptions o;  // gen-model's defaults: 2 layers, dim 64, 4/2 heads of 16, ffn 128, base 1e4
  o.llama3_rope_ctx = 32;
  o.seed = 9;
  const std::string path = tmp("llama3.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  RefConfig rc;
  rc.ff = llama3_factors(16, 10000.0, 32);
  // The factors written are the converter's: 1 for short wavelengths, 8 for long ones.
  auto fr = LlamaRef{(*m)->file(), rc}.mat("rope_freqs.weight");
  ASSERT_EQ(fr.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(fr[i], rc.ff[i], 1e-6 * rc.ff[i]) << i;
  EXPECT_EQ(rc.ff[0], 1.0);
  EXPECT_EQ(rc.ff[7], 8.0);
  const auto toks = test_tokens(40, (*m)->config().n_vocab);
  const auto want = LlamaRef{(*m)->file(), rc}.run(toks);
  const auto got = engine_logits(**m, toks, 24);
  EXPECT_LT(worst_rel(got, want), 1e-4);
  // The factors matter at these positions: ignored or inverted, the
  // reference moves by far more than the tolerance.
  RefConfig none = rc, inverted = rc;
  none.ff.clear();
  for (double& v : inverted.ff) v = 1.0 / v;
  EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), none}.run(toks), want), 1e-2);
  EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), inverted}.run(toks), want), 1e-2);
  std::remove(path.c_str());
}

// A factor tensor of the wrong count, a zero, a NaN, or one on an
// architecture llama.cpp does not read it for: refused, naming it.
TEST(RopeFactors, BadFactorsAreRefusedByName) {
  GenModelOptions o;
  o.llama3_rope_ctx = 32;
  const std::string path = tmp("llama3_src.gguf"), bad = tmp("llama3_bad.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, path).ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok());
  auto without = [](const gguf::Tensor& t) { return t.name != "rope_freqs.weight"; };
  struct Case {
    std::vector<float> v;
    const char* want;
  };
  const float nan = std::nanf("");
  for (const Case& k : {Case{std::vector<float>(7, 1.0f), "has 7 factors; expected one per rotated pair, 8"},
                        Case{{1, 1, 1, 0, 1, 1, 1, 1}, "rope_freqs.weight[3] is 0"},
                        Case{{1, 1, 1, 1, 1, nan, 1, 1}, "rope_freqs.weight[5] is nan"},
                        Case{{1, 1, 1, 1, 1, 1, 1, -2}, "rope_freqs.weight[7] is -2"}}) {
    gguf::Writer w;
    copy_gguf(**f, w, {}, without);
    ASSERT_TRUE(w.add_tensor("rope_freqs.weight", {k.v.size()}, 0, k.v.data(), 4 * k.v.size()).ok());
    ASSERT_TRUE(w.write(bad).ok());
    auto m = Model::load(bad);
    ASSERT_FALSE(m.ok()) << k.want;
    EXPECT_NE(m.error().find(k.want), std::string::npos) << m.error();
  }
  // qwen2 (llama.cpp reads no rope_freqs for it): an unused tensor.
  o.arch = "qwen2";
  o.llama3_rope_ctx = 0;
  ASSERT_TRUE(generate_model(o, nullptr, path).ok());
  auto q = gguf::File::open(path);
  ASSERT_TRUE(q.ok());
  gguf::Writer w;
  copy_gguf(**q, w);
  const std::vector<float> ones(8, 1.0f);
  ASSERT_TRUE(w.add_tensor("rope_freqs.weight", {8}, 0, ones.data(), 32).ok());
  ASSERT_TRUE(w.write(bad).ok());
  auto m = Model::load(bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'rope_freqs.weight'"), std::string::npos) << m.error();
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

// ---------------------------------------------------------------- 3. YaRN

// gen-model's YaRN variant: head dim 32, base 1e4, original context 64,
// factor 4. The correction dims are pairs 0 (beta_fast 32: below 0) and 5
// (beta_slow 1: 4.03 rounded up), so pair 0 keeps its extrapolated angle,
// pairs 1-4 mix the two by the ramp, pairs 5+ are interpolated; cos and sin
// times 1 + 0.1 ln 4.
GenModelOptions yarn_options() {
  GenModelOptions o;
  o.head_dim = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.yarn_factor = 4.0f;
  o.yarn_orig_ctx = 64;
  o.seed = 13;
  return o;
}

RefConfig yarn_reference() {
  RefConfig rc;
  rc.heads = 2;
  rc.kv_heads = 1;
  rc.head_dim = 32;
  rc.scale = 4.0;
  rc.ext = 1.0;
  rc.orig_ctx = 64;
  return rc;
}

TEST(Yarn, MatchesFloat64ReferenceWhereTheRampMatters) {
  const std::string path = tmp("yarn.gguf");
  ASSERT_TRUE(generate_model(yarn_options(), nullptr, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const RefConfig rc = yarn_reference();
  const auto toks = test_tokens(48, (*m)->config().n_vocab);
  const auto want = LlamaRef{(*m)->file(), rc}.run(toks);
  EXPECT_LT(worst_rel(engine_logits(**m, toks, 30), want), 1e-4);
  // Sensitivity: without the ramp (all interpolated, as linear scaling), with
  // the ramp reversed, or without the mscale, the reference moves by far more.
  RefConfig linear = rc, no_ms = rc, flat = rc;
  linear.ext = 0.0;
  linear.mscale = 1.0 + 0.1 * std::log(4.0);  // same magnitude, no mixing
  no_ms.mscale = 1.0 / (1.0 + 0.1 * std::log(4.0));
  flat.beta_slow = 1e-3;  // the ramp over every pair: nearly all extrapolated
  for (const RefConfig* r : {&linear, &no_ms, &flat})
    EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), *r}.run(toks), want), 1e-2);
  std::remove(path.c_str());
}

// The rope.scaling.yarn_* keys of converted files: beta_fast, beta_slow,
// ext_factor and the log multiplier (mscale as llama.cpp's context: the
// file's attn_factor times (1 + 0.1 ln f) / (1 + 0.1 L ln f)).
TEST(Yarn, ReadsTheYarnKeysOfConvertedFiles) {
  const std::string src = tmp("yarn_src.gguf"), path = tmp("yarn_keys.gguf");
  ASSERT_TRUE(generate_model(yarn_options(), nullptr, src).ok());
  auto f = gguf::File::open(src);
  ASSERT_TRUE(f.ok());
  gguf::Writer w;
  copy_gguf(**f, w);
  w.add_f32("llama.rope.scaling.yarn_beta_fast", 16.0f);  // corr dim -0.78: from pair 0
  w.add_f32("llama.rope.scaling.yarn_beta_slow", 0.25f);  // corr dim 6.44: to pair 7
  w.add_f32("llama.rope.scaling.yarn_ext_factor", 0.5f);
  w.add_f32("llama.rope.scaling.yarn_log_multiplier", 0.5f);
  w.add_f32("llama.rope.scaling.attn_factor", 0.9f);
  ASSERT_TRUE(w.write(path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  RefConfig rc = yarn_reference();
  rc.beta_fast = 16.0;
  rc.beta_slow = 0.25;
  rc.ext = 0.5;
  rc.mscale = 0.9 / (1.0 + 0.1 * 0.5 * std::log(4.0));  // angle() adds the 1 + 0.1 ln 4
  const auto toks = test_tokens(48, (*m)->config().n_vocab);
  const auto want = LlamaRef{(*m)->file(), rc}.run(toks);
  EXPECT_LT(worst_rel(engine_logits(**m, toks, 30), want), 1e-4);
  EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), yarn_reference()}.run(toks), want), 1e-2) << "the keys matter here";
  std::remove(src.c_str());
  std::remove(path.c_str());
}

// Scaling types other than none, linear and yarn, and bad YaRN keys: refused,
// naming the key (and the supported types).
TEST(Yarn, BadScalingIsRefusedByName) {
  const std::string src = tmp("yarn_src2.gguf"), path = tmp("yarn_bad.gguf");
  ASSERT_TRUE(generate_model(yarn_options(), nullptr, src).ok());
  auto f = gguf::File::open(src);
  ASSERT_TRUE(f.ok());
  struct Case {
    const char* key;
    float value;  // NaN: the key dropped
    const char* want;
  };
  const float nan = std::nanf("");
  for (const Case& k : {Case{"llama.rope.scaling.factor", nan, "llama.rope.scaling.factor is missing"},
                        Case{"llama.rope.scaling.factor", 0.0f, "llama.rope.scaling.factor = 0"},
                        Case{"llama.rope.scaling.yarn_beta_fast", nan, ""},
                        Case{"llama.rope.scaling.yarn_beta_fast", -1.0f, "llama.rope.scaling.yarn_beta_fast = -1"},
                        Case{"llama.rope.scaling.yarn_beta_slow", 1e30f, "llama.rope.scaling.yarn_beta_slow = 1"},
                        Case{"llama.rope.scaling.yarn_ext_factor", 2.0f, "llama.rope.scaling.yarn_ext_factor = 2"},
                        Case{"llama.rope.scaling.yarn_log_multiplier", -0.5f, "yarn_log_multiplier = -0.5"},
                        Case{"llama.rope.scaling.original_context_length", 0.0f, ""}}) {
    gguf::Writer w;
    const std::string key = k.key;
    copy_gguf(**f, w, [&](const std::string& kk) { return kk != key; });
    const bool drop = std::isnan(k.value);
    if (!drop) {
      if (key.find("original_context_length") != std::string::npos) w.add_u32(key, 0);
      else w.add_f32(key, k.value);
    }
    ASSERT_TRUE(w.write(path).ok());
    auto m = Model::load(path);
    if (*k.want == 0) {  // optional keys: their defaults
      EXPECT_TRUE(m.ok()) << key << ": " << m.error();
      continue;
    }
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_NE(m.error().find(k.want), std::string::npos) << m.error();
  }
  gguf::Writer w;
  copy_gguf(**f, w, [](const std::string& kk) { return kk != "llama.rope.scaling.type"; });
  w.add_string("llama.rope.scaling.type", "dynamic");
  ASSERT_TRUE(w.write(path).ok());
  auto m = Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("rope scaling 'dynamic' is not supported (none, linear, yarn)"), std::string::npos)
      << m.error();
  std::remove(src.c_str());
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- 5. more families

// The engine against the float64 reference (configuration `rc`, written by
// the test) on a gen-model file of `o`; then each of `variants` (one feature
// of the reference dropped) must be far from it: the feature matters there.
void family_case(const GenModelOptions& o, const RefConfig& rc, const std::vector<RefConfig>& variants) {
  const std::string path = tmp("family_" + o.arch + ".gguf");
  ASSERT_TRUE(generate_model(o, nullptr, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const auto toks = test_tokens(40, (*m)->config().n_vocab);
  const auto want = LlamaRef{(*m)->file(), rc}.run(toks);
  EXPECT_LT(worst_rel(engine_logits(**m, toks, 24), want), 1e-4) << o.arch;
  for (size_t i = 0; i < variants.size(); ++i)
    EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), variants[i]}.run(toks), want), 1e-2) << o.arch << " variant " << i;
  std::remove(path.c_str());
}

GenModelOptions family_options(const std::string& arch) {
  GenModelOptions o;  // 4 layers, dim 64, 4/2 heads of 16, ffn 128, F32
  o.arch = arch;
  o.layers = 4;
  o.seed = 17;
  return o;
}

TEST(Families, SmolLM3EveryFourthLayerWithoutRopeMatchesFloat64Reference) {
  RefConfig rc;
  rc.layers = 4;
  rc.no_rope_period = 4;  // layer 3 has no rotation
  RefConfig all_rotate = rc, none = rc;
  all_rotate.no_rope_period = 0;
  none.no_rope_period = 1;
  family_case(family_options("smollm3"), rc, {all_rotate, none});
}

TEST(Families, GraniteScalesMatchFloat64Reference) {
  GenModelOptions o = family_options("granite");
  o.embedding_scale = 12.0f;
  o.residual_scale = 0.22f;
  o.attention_scale = 0.0625f;
  o.logit_scale = 2.0f;
  RefConfig rc;
  rc.layers = 4;
  rc.embd_scale = 12.0;
  rc.residual_scale = double(0.22f);
  rc.attn_scale = 0.0625;
  rc.logit_scale = 2.0;
  RefConfig no_res = rc, no_att = rc, no_logit = rc;
  no_res.residual_scale = 0;
  no_att.attn_scale = 0;
  no_logit.logit_scale = 0;
  family_case(o, rc, {no_res, no_att, no_logit});
}

TEST(Families, Olmo2PostNormsAndWholeVectorQkNormsMatchFloat64Reference) {
  RefConfig rc;
  rc.layers = 4;
  rc.olmo2 = true;
  rc.neox = true;
  RefConfig adjacent = rc;
  adjacent.neox = false;
  family_case(family_options("olmo2"), rc, {adjacent});
  // Per-head Q/K norms instead of whole-vector ones give other logits: the
  // engine's whole-vector norm is checked by the match above (each head's
  // norm weights differ, 16 of 64 per head).
}

// Bad keys of the new families, an architecture turbokv does not know:
// refused naming the key (or the supported architectures).
TEST(Families, BadKeysAreRefusedByName) {
  const std::string src = tmp("fam_src.gguf"), path = tmp("fam_bad.gguf");
  struct Case {
    std::string arch, key;
    float value;  // NaN: drop the key
    std::string want;
  };
  const float nan = std::nanf("");
  for (const Case& k : {Case{"granite", "granite.logit_scale", nan, "granite.logit_scale is missing"},
                        Case{"granite", "granite.logit_scale", 0.0f, "granite.logit_scale = 0"},
                        Case{"granite", "granite.residual_scale", -1.0f, "granite.residual_scale = -1"},
                        Case{"granite", "granite.embedding_scale", std::numeric_limits<float>::infinity(),
                             "granite.embedding_scale = inf"},
                        Case{"olmo2", "olmo2.attention.sliding_window", 4096.0f, "olmo2.attention.sliding_window"},
                        Case{"smollm3", "general.architecture", 0.0f, "architecture 'smollm4' is not supported ("}}) {
    GenModelOptions o = family_options(k.arch);
    o.layers = 1;
    ASSERT_TRUE(generate_model(o, nullptr, src).ok());
    auto f = gguf::File::open(src);
    ASSERT_TRUE(f.ok());
    gguf::Writer w;
    copy_gguf(**f, w, [&](const std::string& kk) { return kk != k.key; });
    if (k.key == "general.architecture") {
      w.add_string(k.key, "smollm4");
    } else if (k.key.find("sliding_window") != std::string::npos) {
      w.add_u32(k.key, 4096);
    } else if (!std::isnan(k.value)) {
      w.add_f32(k.key, k.value);
    }
    ASSERT_TRUE(w.write(path).ok());
    auto m = Model::load(path);
    ASSERT_FALSE(m.ok()) << k.key;
    EXPECT_NE(m.error().find(k.want), std::string::npos) << m.error();
    if (k.arch == "smollm3") {
      EXPECT_NE(m.error().find("smollm3, granite, olmo2"), std::string::npos) << m.error();
    }
  }
  std::remove(src.c_str());
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- 6. gpt-oss

TEST(Families, GptOssMatchesFloat64Reference) {
  GenModelOptions o;
  o.arch = "gpt-oss";
  o.layers = 4;  // layers 0 and 2 with a window of 8
  o.window = 8;
  o.experts = 4;
  o.experts_used = 2;
  o.seed = 23;
  RefConfig rc;
  rc.layers = 4;
  rc.neox = true;
  rc.gptoss = true;
  rc.window = 8;
  rc.experts = 4;
  rc.experts_used = 2;
  RefConfig no_window = rc;
  no_window.window = 0;
  const std::string path = tmp("gptoss.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.error();
  const auto toks = test_tokens(40, (*m)->config().n_vocab);
  const auto want = LlamaRef{(*m)->file(), rc}.run(toks);
  EXPECT_LT(worst_rel(engine_logits(**m, toks, 24), want), 1e-4);
  EXPECT_GT(worst_rel(LlamaRef{(*m)->file(), no_window}.run(toks), want), 1e-2) << "the windows matter";
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- llama.cpp's perplexities

// tests/data/llama-cpp-ppl/figures.tsv: gen-model files (made again here,
// byte for byte: size and hash checked) with llama-perplexity's figure on
// the first 60,000 characters of WikiText-2 test, -c 128 --chunks 4, f16
// cache (README there). turbokv must be within 0.05%.
struct PplFixture {
  std::string name;
  GenModelOptions o;
  uint64_t bytes = 0;
  std::string fnv;
  double ppl = 0;
};

std::vector<PplFixture> ppl_fixtures() {
  std::ifstream in(std::string(TKV_SOURCE_DIR) + "/tests/data/llama-cpp-ppl/figures.tsv");
  EXPECT_TRUE(in.good()) << "tests/data/llama-cpp-ppl/figures.tsv";
  std::vector<PplFixture> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> col;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, '\t');) col.push_back(c);
    EXPECT_EQ(col.size(), 5u) << line;
    if (col.size() != 5) continue;
    PplFixture f;
    f.name = col[0];
    std::stringstream os(col[1]);
    for (std::string kv; os >> kv;) {
      const size_t eq = kv.find('=');
      const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
      GenModelOptions& o = f.o;
      if (k == "arch") o.arch = v;
      else if (k == "type") o.type = v;
      else if (k == "layers") o.layers = std::stoi(v);
      else if (k == "dim") o.dim = std::stoi(v);
      else if (k == "heads") o.heads = std::stoi(v);
      else if (k == "kv_heads") o.kv_heads = std::stoi(v);
      else if (k == "head_dim") o.head_dim = std::stoi(v);
      else if (k == "ffn") o.ffn = std::stoi(v);
      else if (k == "seed") o.seed = std::stoull(v);
      else if (k == "ctx") o.ctx = std::stoi(v);
      else if (k == "rope_base") o.rope_base = std::stof(v);
      else if (k == "llama3_rope_ctx") o.llama3_rope_ctx = std::stoi(v);
      else if (k == "yarn_factor") o.yarn_factor = std::stof(v);
      else if (k == "yarn_orig_ctx") o.yarn_orig_ctx = std::stoi(v);
      else if (k == "embedding_scale") o.embedding_scale = std::stof(v);
      else if (k == "residual_scale") o.residual_scale = std::stof(v);
      else if (k == "attention_scale") o.attention_scale = std::stof(v);
      else if (k == "logit_scale") o.logit_scale = std::stof(v);
      else if (k == "experts") o.experts = std::stoi(v);
      else if (k == "experts_used") o.experts_used = std::stoi(v);
      else if (k == "window") o.window = std::stoi(v);
      else ADD_FAILURE() << f.name << ": unknown option " << k;
    }
    f.bytes = std::stoull(col[2]);
    f.fnv = col[3];
    f.ppl = std::stod(col[4]);
    out.push_back(f);
  }
  return out;
}

TEST(LlamaCppPerplexity, GenModelFilesWithinFiveHundredthsOfAPercent) {
  TKV_NEED_SHARED("models/ref-5m/ref-5m-f16.gguf", "models/families/wikitext-2-test-60k-lf.txt");
  auto vocab = gguf::File::open(shared_path("models/ref-5m/ref-5m-f16.gguf"));
  ASSERT_TRUE(vocab.ok()) << vocab.error();
  std::ifstream tin(shared_path("models/families/wikitext-2-test-60k-lf.txt"));
  std::stringstream text;
  text << tin.rdbuf();
  const auto fixtures = ppl_fixtures();
  EXPECT_GE(fixtures.size(), 1u);
  for (const PplFixture& f : fixtures) {
    const std::string path = tmp("ppl_" + f.name + ".gguf");
    ASSERT_TRUE(generate_model(f.o, vocab->get(), path).ok()) << f.name;
    std::ifstream bin(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.size(), f.bytes) << f.name << ": gen-model no longer writes the file llama.cpp measured";
    if (f.fnv != "-") {
      char h[32];
      std::snprintf(h, sizeof(h), "%016llx", static_cast<unsigned long long>(fnv1a(bytes.data(), bytes.size())));
      EXPECT_EQ(std::string(h), f.fnv) << f.name << ": gen-model no longer writes the file llama.cpp measured";
    }
    auto m = Model::load(path);
    ASSERT_TRUE(m.ok()) << m.error();
    PerplexityOptions po;
    po.n_ctx = 128;
    po.max_chunks = 4;
    po.cache.type_k = po.cache.type_v = "f16";
    auto r = perplexity(**m, text.str(), po);
    ASSERT_TRUE(r.ok()) << r.error();
    const double rel = std::abs(r->ppl / f.ppl - 1.0);
    std::printf("%-14s turbokv PPL %.4f, llama.cpp %.4f (%.4f %%)\n", f.name.c_str(), r->ppl, f.ppl, 100 * rel);
    const double bound = 5e-4;
    EXPECT_LT(rel, bound) << f.name << ": turbokv " << r->ppl << " vs llama.cpp " << f.ppl;
    std::remove(path.c_str());
  }
}

// ---------------------------------------------------------------- 4. split files

// Cuts a GGUF into `count` parts as llama-gguf-split does: every part has
// split.no, split.count and split.tensors.count, the first also all the
// metadata; tensors in file order, about the same number in each part.
void split_gguf(const std::string& src, const std::string& prefix, int count) {
  auto f = gguf::File::open(src);
  ASSERT_TRUE(f.ok()) << f.error();
  const auto& ts = (*f)->tensors();
  const size_t per = (ts.size() + count - 1) / count;
  for (int k = 0; k < count; ++k) {
    gguf::Writer w;
    if (k == 0) copy_gguf(**f, w, {}, [](const gguf::Tensor&) { return false; });
    w.add_u32("split.no", static_cast<uint32_t>(k));
    w.add_u32("split.count", static_cast<uint32_t>(count));
    w.add_i32("split.tensors.count", static_cast<int32_t>(ts.size()));
    for (size_t i = k * per; i < std::min(ts.size(), (k + 1) * per); ++i)
      ASSERT_TRUE(w.add_tensor(ts[i].name, ts[i].dims, ts[i].type, ts[i].data, ts[i].n_bytes).ok());
    char name[64];
    std::snprintf(name, sizeof(name), "-%05d-of-%05d.gguf", k + 1, count);
    ASSERT_TRUE(w.write(prefix + name).ok());
  }
}

std::vector<float> all_logits(const Model& m, int T) {
  const auto toks = test_tokens(T, m.config().n_vocab);
  KvCacheOptions co;
  co.type_k = co.type_v = "f16";
  co.capacity = T;
  auto cache = KvCache::create(m.config().kv_shape(), co);
  EXPECT_TRUE(cache.ok());
  std::vector<float> lg(size_t(T) * m.config().n_vocab);
  EXPECT_TRUE(m.forward(toks.data(), T, 0, **cache, 2, lg.data(), true).ok());
  return lg;
}

std::string part(const std::string& prefix, int k, int n) {
  char name[64];
  std::snprintf(name, sizeof(name), "-%05d-of-%05d.gguf", k, n);
  return prefix + name;
}

TEST(SplitFiles, ThreePartsGiveTheSingleFilesLogitsBitForBit) {
  GenModelOptions o;
  o.type = "Q8_0";
  o.layers = 3;
  const std::string single = tmp("whole.gguf"), prefix = tmp("cut");
  ASSERT_TRUE(generate_model(o, nullptr, single).ok());
  split_gguf(single, prefix, 3);
  auto a = Model::load(single);
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = Model::load(part(prefix, 1, 3));
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_EQ((*b)->file().parts().size(), 3u);
  uint64_t n = 0;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ((*b)->file().parts()[k].path, part(prefix, k + 1, 3));
    EXPECT_GT((*b)->file().parts()[k].n_tensors, 0u);
    n += (*b)->file().parts()[k].n_tensors;
  }
  EXPECT_EQ(n, (*a)->file().tensors().size());
  EXPECT_TRUE((*a)->file().parts().empty());
  const auto la = all_logits(**a, 24), lb = all_logits(**b, 24);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << "logits differ";
  EXPECT_EQ((*a)->fingerprint(), (*b)->fingerprint());
  for (int k = 1; k <= 3; ++k) std::remove(part(prefix, k, 3).c_str());
  std::remove(single.c_str());
}

TEST(SplitFiles, MissingReorderedOrMismatchedPartsAreRefusedByName) {
  GenModelOptions o;
  const std::string single = tmp("whole2.gguf"), prefix = tmp("cut2"), other = tmp("other");
  ASSERT_TRUE(generate_model(o, nullptr, single).ok());
  auto load_error = [&](const std::string& path) {
    auto m = Model::load(path);
    EXPECT_FALSE(m.ok()) << path;
    return m.ok() ? std::string() : m.error();
  };
  const std::string p1 = part(prefix, 1, 3), p2 = part(prefix, 2, 3), p3 = part(prefix, 3, 3);
  // Missing: the third part.
  split_gguf(single, prefix, 3);
  std::remove(p3.c_str());
  std::string e = load_error(p1);
  EXPECT_NE(e.find("part 3 of 3 (" + p3 + ")"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  // Reordered: parts 2 and 3 swapped by name.
  split_gguf(single, prefix, 3);
  std::rename(p2.c_str(), (p2 + ".x").c_str());
  std::rename(p3.c_str(), p2.c_str());
  std::rename((p2 + ".x").c_str(), p3.c_str());
  e = load_error(p1);
  EXPECT_NE(e.find("part 2 of 3 (" + p2 + ") says it is part 3 of 3"), std::string::npos) << e;
  // Mismatched: the third part of a split into 4 renamed as the third of 3.
  split_gguf(single, other, 4);
  split_gguf(single, prefix, 3);
  std::rename(part(other, 3, 4).c_str(), p3.c_str());
  e = load_error(p1);
  EXPECT_NE(e.find("part 3 of 3 (" + p3 + ") says it is part 3 of 4"), std::string::npos) << e;
  // Mismatched: a part of another model's split with the same numbering.
  GenModelOptions o2 = o;
  o2.layers = 3;
  ASSERT_TRUE(generate_model(o2, nullptr, single + ".b").ok());
  split_gguf(single + ".b", other, 3);
  split_gguf(single, prefix, 3);
  std::rename(part(other, 2, 3).c_str(), p2.c_str());
  e = load_error(p1);
  EXPECT_NE(e.find("part 2 of 3 (" + p2 + ") has split.tensors.count"), std::string::npos) << e;
  // A later part opened alone, and a first part not named as llama-gguf-split names it.
  split_gguf(single, prefix, 3);
  e = load_error(p2);
  EXPECT_NE(e.find(p2 + " is part 2 of 3 of a split model"), std::string::npos) << e;
  std::rename(p1.c_str(), (prefix + ".gguf").c_str());
  e = load_error(prefix + ".gguf");
  EXPECT_NE(e.find("must be named PREFIX-00001-of-00003.gguf"), std::string::npos) << e;
  std::remove((prefix + ".gguf").c_str());
  for (int k = 1; k <= 4; ++k) std::remove(part(other, k, 4).c_str());
  for (int k = 1; k <= 3; ++k) {
    std::remove(part(prefix, k, 3).c_str());
    std::remove(part(other, k, 3).c_str());
  }
  std::remove(single.c_str());
  std::remove((single + ".b").c_str());
}

// tests/data/split: a model cut by llama-gguf-split itself (README there);
// gen-model writes the same model again here: the parts hold its tensors
// byte for byte and give its logits bit for bit.
TEST(SplitFiles, LlamaGgufSplitsPartsLoadAsTheSingleFile) {
  const std::string dir = std::string(TKV_SOURCE_DIR) + "/tests/data/split/";
  GenModelOptions o;
  o.layers = 1;
  o.dim = 32;
  o.heads = 2;
  o.kv_heads = 1;
  o.head_dim = 16;
  o.ffn = 32;
  o.vocab = 300;
  o.type = "F16";
  o.seed = 21;
  const std::string single = tmp("tiny.gguf");
  ASSERT_TRUE(generate_model(o, nullptr, single).ok());
  auto a = Model::load(single);
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = Model::load(dir + "tiny-00001-of-00003.gguf");
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_EQ((*b)->file().parts().size(), 3u);
  for (const gguf::Tensor& t : (*a)->file().tensors()) {
    const gguf::Tensor* u = (*b)->file().tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dims, t.dims) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    ASSERT_EQ(u->n_bytes, t.n_bytes) << t.name;
    EXPECT_EQ(std::memcmp(u->data, t.data, t.n_bytes), 0) << t.name;
  }
  const auto la = all_logits(**a, 16), lb = all_logits(**b, 16);
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0) << "logits differ";
  std::remove(single.c_str());
}

// Every surface opens a split model through the one loader: the CLI (run,
// inspect listing the parts) and the C API.
TEST_F(Cli, SplitModelThroughInspectRunAndTheCApi) {
  const std::string first = std::string(TKV_SOURCE_DIR) + "/tests/data/split/tiny-00001-of-00003.gguf";
  CliResult r = run("inspect --no-tensors '" + first + "'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("split model: 3 parts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("part 3: " + std::string(TKV_SOURCE_DIR) + "/tests/data/split/tiny-00003-of-00003.gguf, 4 tensors"),
            std::string::npos) << r.out;
  r = run("run -m '" + first + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(r.rc, 0) << r.err;
  // A later part alone: inspect shows it and says which part it is; run refuses it.
  const std::string second = std::string(TKV_SOURCE_DIR) + "/tests/data/split/tiny-00002-of-00003.gguf";
  r = run("inspect --no-tensors '" + second + "'");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("part 2 of 3 of a split model"), std::string::npos) << r.out;
  r = run("run -m '" + second + "' -p hello -n 4");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("is part 2 of 3 of a split model"), std::string::npos) << r.err;
  tkv_model* m = nullptr;
  ASSERT_EQ(tkv_model_load(first.c_str(), &m), TKV_OK) << tkv_last_error();
  EXPECT_EQ(tkv_model_n_vocab(m), 300);
  tkv_model_free(m);
  EXPECT_NE(tkv_model_load(second.c_str(), &m), TKV_OK);
  EXPECT_NE(std::string(tkv_last_error()).find("part 2 of 3"), std::string::npos) << tkv_last_error();
}

}  // namespace model_files
}  // namespace tkv
