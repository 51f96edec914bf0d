#include "cache/kv_cache.h"

#include <string>

namespace tkv {

Expected<std::unique_ptr<KvCache>> KvCache::create(int n_layer, int n_kv_heads, int head_dim,
                                                   const KvCacheOptions& o) {
  if (n_layer < 1 || n_kv_heads < 1) return Status::Error("kv cache: need at least one layer and one KV head");
  if (o.capacity < 1) return Status::Error("kv cache: capacity must be at least 1 token");
  auto c = std::unique_ptr<KvCache>(new KvCache());
  c->opt_ = o;
  c->n_kv_heads_ = n_kv_heads;
  c->d_ = head_dim;
  auto k = make_codec(o.type_k, head_dim, o.seed);
  if (!k) return Status::Error("cache type K: " + k.error());
  auto v = make_codec(o.type_v, head_dim, o.seed ^ 0x5555555555555555ull);
  if (!v) return Status::Error("cache type V: " + v.error());
  c->k_codec_ = std::move(*k);
  c->v_codec_ = std::move(*v);
  c->f16_ = std::move(*make_codec("f16", head_dim));
  c->layers_.resize(n_layer);
  // 64 spare bytes: kernels may read a little past the last row.
  const size_t kb = c->k_codec_->row_bytes() * size_t(n_kv_heads) * o.capacity + 64;
  const size_t vb = c->v_codec_->row_bytes() * size_t(n_kv_heads) * o.capacity + 64;
  for (auto& l : c->layers_) {
    l.k = HugeBuffer(kb);
    l.v = HugeBuffer(vb);
    l.mu_k.assign(size_t(n_kv_heads) * head_dim, 0.0f);
    l.mu_v.assign(size_t(n_kv_heads) * head_dim, 0.0f);
  }
  return c;
}

void KvCache::fix_mean(Layer& L, int n, const float* k, const float* v) {
  const int H = n_kv_heads_, d = d_;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < d; ++i) {
      double sk = 0, sv = 0;
      for (int t = 0; t < n; ++t) {
        sk += k[(size_t(t) * H + h) * d + i];
        sv += v[(size_t(t) * H + h) * d + i];
      }
      L.mu_k[h * d + i] = static_cast<float>(sk / n);
      L.mu_v[h * d + i] = static_cast<float>(sv / n);
    }
  L.centred = true;
}

Status KvCache::quantize_rows(Layer& L, int layer, int pos, int n, const float* k, const float* v) {
  const int H = n_kv_heads_, d = d_;
  std::vector<float> row(d);
  const size_t krb = k_codec_->row_bytes(), vrb = v_codec_->row_bytes();
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h) {
      const float* kr = k + (size_t(t) * H + h) * d;
      const float* vr = v + (size_t(t) * H + h) * d;
      for (int i = 0; i < d; ++i) row[i] = kr[i] - (L.centred ? L.mu_k[h * d + i] : 0.0f);
      Status s = k_codec_->quantize(row.data(), 1, L.k.data() + (size_t(h) * opt_.capacity + pos + t) * krb);
      if (!s.ok())
        return Status::Error("layer " + std::to_string(layer) + " K, token " + std::to_string(pos + t) + ", head " +
                             std::to_string(h) + ": " + s.message());
      for (int i = 0; i < d; ++i) row[i] = vr[i] - (L.centred ? L.mu_v[h * d + i] : 0.0f);
      s = v_codec_->quantize(row.data(), 1, L.v.data() + (size_t(h) * opt_.capacity + pos + t) * vrb);
      if (!s.ok())
        return Status::Error("layer " + std::to_string(layer) + " V, token " + std::to_string(pos + t) + ", head " +
                             std::to_string(h) + ": " + s.message());
    }
  return Status::Ok();
}

Status KvCache::append(int layer, int pos, int n, const float* k, const float* v) {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return Status::Error("kv cache: bad layer " + std::to_string(layer));
  Layer& L = layers_[layer];
  if (pos != L.written) return Status::Error("kv cache: layer " + std::to_string(layer) + " expects position " +
                                             std::to_string(L.written) + ", got " + std::to_string(pos));
  if (n < 1) return Status::Error("kv cache: nothing to append");
  if (pos + n > opt_.capacity)
    return Status::Error("kv cache full: " + std::to_string(pos + n) + " tokens > capacity " + std::to_string(opt_.capacity) +
                         " (raise -c)");
  const int H = n_kv_heads_, d = d_;
  const bool tq = k_codec_->family() == FormatFamily::kTurbo || v_codec_->family() == FormatFamily::kTurbo;
  const int M = opt_.mean_tokens;
  if (pos == 0 && opt_.mean_center && tq && M > 0) {
    if (n >= M || n >= opt_.capacity) {  // enough in the first batch: fix mu now
      fix_mean(L, n, k, v);
    } else {
      L.staging = true;
      L.sk.assign(size_t(H) * M * f16_->row_bytes() + 64, 0);
      L.sv.assign(size_t(H) * M * f16_->row_bytes() + 64, 0);
    }
  }
  if (L.staging) {
    const size_t rb = f16_->row_bytes();
    for (int t = 0; t < n && pos + t < M; ++t)
      for (int h = 0; h < H; ++h) {
        Status s = f16_->quantize(k + (size_t(t) * H + h) * d, 1, L.sk.data() + (size_t(h) * M + pos + t) * rb);
        if (s.ok()) s = f16_->quantize(v + (size_t(t) * H + h) * d, 1, L.sv.data() + (size_t(h) * M + pos + t) * rb);
        if (!s.ok())
          return Status::Error("layer " + std::to_string(layer) + ", token " + std::to_string(pos + t) + ": " + s.message());
      }
    L.written = pos + n;
    if (L.written < M) return Status::Ok();
    // Enough rows seen: mu from the staged rows plus this batch, then quantize all.
    const int total = L.written;
    std::vector<float> kall(size_t(total) * H * d), vall(kall.size());
    std::vector<float> row(d);
    const int staged = std::min(pos, M);
    for (int t = 0; t < staged; ++t)
      for (int h = 0; h < H; ++h) {
        f16_->dequantize(L.sk.data() + (size_t(h) * M + t) * rb, 1, &kall[(size_t(t) * H + h) * d]);
        f16_->dequantize(L.sv.data() + (size_t(h) * M + t) * rb, 1, &vall[(size_t(t) * H + h) * d]);
      }
    std::copy(k, k + size_t(n) * H * d, kall.begin() + size_t(pos) * H * d);
    std::copy(v, v + size_t(n) * H * d, vall.begin() + size_t(pos) * H * d);
    fix_mean(L, total, kall.data(), vall.data());
    L.staging = false;
    L.sk.clear();
    L.sk.shrink_to_fit();
    L.sv.clear();
    L.sv.shrink_to_fit();
    return quantize_rows(L, layer, 0, total, kall.data(), vall.data());
  }
  Status s = quantize_rows(L, layer, pos, n, k, v);
  if (!s.ok()) return s;
  L.written = pos + n;
  return Status::Ok();
}

size_t KvCache::staging_bytes() const {
  size_t b = 0;
  for (const auto& l : layers_) b += l.sk.size() + l.sv.size();
  return b;
}

KvRows KvCache::k_rows(int layer) const {
  if (layers_[layer].staging) {
    const size_t rb = f16_->row_bytes();
    return {f16_.get(), layers_[layer].sk.data(), rb, rb * opt_.mean_tokens};
  }
  const size_t rb = k_codec_->row_bytes();
  return {k_codec_.get(), layers_[layer].k.data(), rb, rb * opt_.capacity};
}
KvRows KvCache::v_rows(int layer) const {
  if (layers_[layer].staging) {
    const size_t rb = f16_->row_bytes();
    return {f16_.get(), layers_[layer].sv.data(), rb, rb * opt_.mean_tokens};
  }
  const size_t rb = v_codec_->row_bytes();
  return {v_codec_.get(), layers_[layer].v.data(), rb, rb * opt_.capacity};
}

}  // namespace tkv
