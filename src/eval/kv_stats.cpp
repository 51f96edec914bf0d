#include "eval/kv_stats.h"

#include "codec/calibrated.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "codec/format.h"
#include "util/rng.h"

namespace tkv {
namespace {

// Four partial sums: lets the compiler vectorize a reduction it may not reorder.
double dot(const double* a, const double* b, int d) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= d; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < d; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// o = softmax(q·K / sqrt d) V with K = V = rows; also returns the raw scores q·k_i.
void attend(const double* q, const double* rows, size_t n, int d, double* scores, double* o) {
  double mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    scores[i] = dot(q, rows + i * d, d);
    mx = std::max(mx, scores[i]);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::fill(o, o + d, 0.0);
  double z = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = std::exp((scores[i] - mx) * scale);
    z += p;
    const double* r = rows + i * d;
    for (int c = 0; c < d; ++c) o[c] += p * r[c];
  }
  for (int c = 0; c < d; ++c) o[c] /= z;
}

// μ over the first mean_rows rows (all if fewer). A non-finite value there would
// poison every row, so it is reported here by row rather than later as row 0.
Expected<std::vector<double>> head_mean(const float* x, size_t n, int d, int mean_rows) {
  const size_t m = std::min(n, static_cast<size_t>(std::max(1, mean_rows)));
  std::vector<double> mu(d, 0.0);
  for (size_t r = 0; r < m; ++r)
    for (int c = 0; c < d; ++c) {
      const float v = x[r * d + c];
      if (!std::isfinite(v))
        return Status::Error("mean centring: row " + std::to_string(r) + " element " + std::to_string(c) +
                             " is " + std::to_string(v) + " (NaN or Inf cannot be stored)");
      mu[c] += v;
    }
  for (auto& v : mu) v /= static_cast<double>(m);
  return mu;
}

// Codes n rows (x - μ when mu is given) and decodes them back, adding μ: x̂ in double.
Status decode_rows(const Codec& codec, const float* x, size_t n, const std::vector<double>* mu,
                   std::vector<double>& out) {
  const int d = codec.dim();
  std::vector<float> centered;
  const float* src = x;
  if (mu) {
    centered.resize(n * d);
    for (size_t r = 0; r < n; ++r)
      for (int c = 0; c < d; ++c) centered[r * d + c] = static_cast<float>(x[r * d + c] - (*mu)[c]);
    src = centered.data();
  }
  std::vector<uint8_t> bytes(n * codec.row_bytes());
  Status s = codec.quantize(src, n, bytes.data());
  if (!s.ok()) return s;
  std::vector<float> dec(n * d);
  codec.dequantize(bytes.data(), n, dec.data());
  out.resize(n * d);
  for (size_t r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) out[r * d + c] = dec[r * d + c] + (mu ? (*mu)[c] : 0.0);
  return Status::Ok();
}

// What every format is compared against, computed once per head.
struct HeadReference {
  std::vector<double> x;       // n x d originals
  std::vector<double> q;       // nq x d random queries
  std::vector<double> scores;  // nq x n, q·k
  std::vector<double> out;     // nq x d, attention outputs
  std::vector<double> mu;      // centring mean
};

// Queries: Gaussian with the per-channel standard deviation of the head's own
// vectors. Real queries put their weight on the channels where keys vary (that
// is what makes scores informative), and a constant offset q·μ cancels in the
// softmax anyway; an isotropic query would under-weight the outlier channels
// where the quantization error of unrotated formats concentrates.
HeadReference make_reference(const float* x, size_t n, int d, int nq, uint64_t seed) {
  HeadReference ref;
  ref.x.assign(x, x + n * d);
  std::vector<double> mean(d, 0.0), var(d, 0.0);
  for (size_t r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) mean[c] += ref.x[r * d + c];
  for (auto& m : mean) m /= static_cast<double>(n);
  for (size_t r = 0; r < n; ++r)
    for (int c = 0; c < d; ++c) var[c] += std::pow(ref.x[r * d + c] - mean[c], 2);
  Rng rng(seed);
  ref.q.resize(static_cast<size_t>(nq) * d);
  for (int j = 0; j < nq; ++j)
    for (int c = 0; c < d; ++c) ref.q[j * d + c] = rng.gaussian() * std::sqrt(var[c] / static_cast<double>(n));
  ref.scores.resize(static_cast<size_t>(nq) * n);
  ref.out.resize(static_cast<size_t>(nq) * d);
  for (int j = 0; j < nq; ++j)
    attend(&ref.q[j * d], ref.x.data(), n, d, &ref.scores[j * n], &ref.out[j * d]);
  return ref;
}

struct Accum {
  double err2 = 0, energy = 0, cos_sum = 0, ip_err2 = 0, ip_ref2 = 0, o_err2 = 0, o_ref2 = 0;
  size_t rows = 0;
};

void accumulate(const HeadReference& ref, const std::vector<double>& xh, size_t n, int d, Accum& a) {
  for (size_t r = 0; r < n; ++r) {
    const double* x = &ref.x[r * d];
    const double* y = &xh[r * d];
    double e = 0, xx = 0, yy = 0, xy = 0;
    for (int c = 0; c < d; ++c) {
      e += (x[c] - y[c]) * (x[c] - y[c]);
      xx += x[c] * x[c];
      yy += y[c] * y[c];
      xy += x[c] * y[c];
    }
    a.err2 += e;
    a.energy += xx;
    a.cos_sum += (xx > 0 && yy > 0) ? xy / std::sqrt(xx * yy) : (xx == yy ? 1.0 : 0.0);
    ++a.rows;
  }
  const int nq = static_cast<int>(ref.q.size() / d);
  std::vector<double> s(n), o(d);
  for (int j = 0; j < nq; ++j) {
    attend(&ref.q[j * d], xh.data(), n, d, s.data(), o.data());
    for (size_t i = 0; i < n; ++i) {
      const double t = ref.scores[j * n + i];
      a.ip_err2 += (t - s[i]) * (t - s[i]);
      a.ip_ref2 += t * t;
    }
    for (int c = 0; c < d; ++c) {
      const double t = ref.out[j * d + c];
      a.o_err2 += (t - o[c]) * (t - o[c]);
      a.o_ref2 += t * t;
    }
  }
}

double ratio(double err, double ref) { return ref > 0 ? err / ref : (err == 0 ? 0.0 : INFINITY); }

}  // namespace

Expected<std::vector<KvStatsRow>> kv_stats(const KvFile& kv, const std::string& source, const KvStatsOptions& opt) {
  if (kv.kv_heads == 0 || kv.tokens == 0 || kv.data.size() != kv.values())
    return Status::Error(source + ": no vectors (kv_heads " + std::to_string(kv.kv_heads) + ", tokens " +
                         std::to_string(kv.tokens) + ", " + std::to_string(kv.data.size()) + " values)");
  const int d = static_cast<int>(kv.head_dim);
  // Calibrated mode: fit on rows [0, n0), measure rows [n0, n0 + n).
  const size_t n0 = opt.calibrated ? kv.tokens / 2 : 0;
  const size_t n = kv.tokens - n0;
  if (opt.calibrated && n0 < 2)
    return Status::Error(source + ": --calibrated needs at least 4 vectors per head, got " + std::to_string(kv.tokens));
  const auto& names = opt.formats.empty() ? all_format_names() : opt.formats;
  // codecs[f * heads + h]: plain formats share one codec, tqc has one per head.
  const size_t H = kv.kv_heads;
  std::vector<std::unique_ptr<Codec>> owned;
  std::vector<const Codec*> codecs;
  std::vector<HeadBasis> bases(H);
  if (opt.calibrated)
    for (uint32_t h = 0; h < H; ++h) {
      auto b = fit_head_basis(kv.head(h), n0, d);
      if (!b) return Status::Error(source + ": head " + std::to_string(h) + ": " + b.error());
      bases[h] = std::move(*b);
    }
  for (const auto& name : names) {
    if (is_calibrated_format(name)) {
      if (!opt.calibrated) return Status::Error(source + ": " + name + " needs --calibrated");
      for (uint32_t h = 0; h < H; ++h) {
        auto c = make_calibrated_codec(name, bases[h]);
        if (!c) return Status::Error(source + ": " + c.error());
        owned.push_back(std::move(*c));
        codecs.push_back(owned.back().get());
      }
    } else {
      auto c = make_codec(name, d, opt.seed);
      if (!c) return Status::Error(source + ": " + c.error());
      owned.push_back(std::move(*c));
      for (uint32_t h = 0; h < H; ++h) codecs.push_back(owned.back().get());
    }
  }
  const size_t nf = names.size();
  std::vector<bool> variants;  // mean_centered flags, in report order
  if (opt.plain) variants.push_back(false);
  if (opt.centered) variants.push_back(true);

  std::vector<Accum> acc(nf * variants.size());
  std::vector<double> xh;
  for (uint32_t h = 0; h < kv.kv_heads; ++h) {
    const std::string where = source + ": head " + std::to_string(h) + ": ";
    const float* x = kv.head(h) + n0 * d;
    HeadReference ref = make_reference(x, n, d, opt.queries, opt.seed ^ (0x71756572ull * (h + 1)));
    if (opt.calibrated) {
      ref.mu.assign(bases[h].mean.begin(), bases[h].mean.end());
    } else if (opt.centered) {
      auto mu = head_mean(x, n, d, opt.mean_rows);
      if (!mu) return Status::Error(where + mu.error());
      ref.mu = std::move(*mu);
    }
    for (size_t f = 0; f < nf; ++f)
      for (size_t v = 0; v < variants.size(); ++v) {
        const Codec& c = *codecs[f * H + h];
        const bool tqc = c.family() == FormatFamily::kCalibrated;
        if (tqc && !variants[v] && variants.size() > 1) continue;  // tqc is centred by construction
        const bool centre = variants[v] || tqc;
        Status s = decode_rows(c, x, n, centre ? &ref.mu : nullptr, xh);
        if (!s.ok()) return Status::Error(where + s.message());
        accumulate(ref, xh, n, d, acc[f * variants.size() + v]);
      }
  }

  std::vector<KvStatsRow> rows;
  for (size_t f = 0; f < nf; ++f)
    for (size_t v = 0; v < variants.size(); ++v) {
      const Accum& a = acc[f * variants.size() + v];
      if (a.rows == 0) continue;  // a tqc format's uncentred variant
      KvStatsRow r;
      r.source = source;
      r.format = codecs[f * H]->name();
      r.d = d;
      r.heads = kv.kv_heads;
      r.tokens = static_cast<uint32_t>(n);
      r.mean_centered = variants[v] || codecs[f * H]->family() == FormatFamily::kCalibrated;
      r.bits_per_value = codecs[f * H]->bits_per_value();
      r.size_vs_f16 = 16.0 / r.bits_per_value;
      r.rel_mse = ratio(a.err2, a.energy);
      r.cosine = a.cos_sum / static_cast<double>(a.rows);
      r.ip_rel_err = std::sqrt(ratio(a.ip_err2, a.ip_ref2));
      r.attn_rel_err = std::sqrt(ratio(a.o_err2, a.o_ref2));
      r.rd_ratio = r.rel_mse / std::pow(4.0, -r.bits_per_value);
      rows.push_back(std::move(r));
    }
  return rows;
}

Expected<KvFile> kv_roundtrip(const KvFile& kv, const std::string& format, bool mean_center, uint64_t seed,
                              int mean_rows) {
  if (kv.data.size() != kv.values())
    return Status::Error("KV data has " + std::to_string(kv.data.size()) + " values, header implies " +
                         std::to_string(kv.values()));
  auto codec = make_codec(format, static_cast<int>(kv.head_dim), seed);
  if (!codec) return codec.status();
  KvFile out = kv;
  std::vector<double> xh;
  for (uint32_t h = 0; h < kv.kv_heads; ++h) {
    const std::string where = "head " + std::to_string(h) + ": ";
    std::vector<double> mu;
    if (mean_center) {
      auto m = head_mean(kv.head(h), kv.tokens, kv.head_dim, mean_rows);
      if (!m) return Status::Error(where + m.error());
      mu = std::move(*m);
    }
    Status s = decode_rows(**codec, kv.head(h), kv.tokens, mean_center ? &mu : nullptr, xh);
    if (!s.ok()) return Status::Error(where + s.message());
    std::transform(xh.begin(), xh.end(), out.head(h), [](double v) { return static_cast<float>(v); });
  }
  return out;
}

std::string kv_stats_table(const std::vector<KvStatsRow>& rows) {
  // Each variant's block is 48 characters wide: "%9 %9 %9 %9 %8" and spaces.
  auto title = [](const std::string& name) {
    const size_t left = (48 - name.size() - 2) / 2, right = 48 - name.size() - 2 - left;
    return std::string(left, '-') + " " + name + " " + std::string(right, '-');
  };
  const std::string cols = "  rel MSE    cosine    IP err  attn err RD ratio";
  std::string t = std::string(24, ' ') + " | " + title("plain") + " | " + title("mean-centred") + "\n" +
                  "format   bits/val  x<f16 | " + cols + " | " + cols + "\n";
  char buf[256];
  auto metrics = [](const KvStatsRow* r) {
    char b[96];
    if (!r) {
      std::snprintf(b, sizeof b, "%9s %9s %9s %9s %8s", "-", "-", "-", "-", "-");
    } else {
      std::snprintf(b, sizeof b, r->rd_ratio < 1000 ? "%9.3e %9.6f %9.3e %9.3e %8.4g" : "%9.3e %9.6f %9.3e %9.3e %8.2e",
                    r->rel_mse, r->cosine, r->ip_rel_err, r->attn_rel_err, r->rd_ratio);
    }
    return std::string(b);
  };
  std::vector<std::string> order;
  for (const auto& r : rows)
    if (std::find(order.begin(), order.end(), r.format) == order.end()) order.push_back(r.format);
  for (const auto& name : order) {
    const KvStatsRow *plain = nullptr, *centered = nullptr;
    for (const auto& r : rows)
      if (r.format == name) (r.mean_centered ? centered : plain) = &r;
    const KvStatsRow* any = plain ? plain : centered;
    std::snprintf(buf, sizeof buf, "%-8s %8.3f %6.2f | %s | %s\n", name.c_str(), any->bits_per_value,
                  any->size_vs_f16, metrics(plain).c_str(), metrics(centered).c_str());
    t += buf;
  }
  return t;
}

nlohmann::json kv_stats_json(const std::vector<KvStatsRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : rows)
    a.push_back({{"source", r.source},
                 {"format", r.format},
                 {"d", r.d},
                 {"heads", r.heads},
                 {"tokens", r.tokens},
                 {"mean_centered", r.mean_centered},
                 {"bits_per_value", r.bits_per_value},
                 {"size_vs_f16", r.size_vs_f16},
                 {"rel_mse", r.rel_mse},
                 {"cosine", r.cosine},
                 {"ip_rel_err", r.ip_rel_err},
                 {"attn_rel_err", r.attn_rel_err},
                 {"rd_ratio", r.rd_ratio}});
  return a;
}

}  // namespace tkv
