// The C API's errors, codecs, codebooks, the fused attention kernel and
// kv-stats (include/turbokv.h). Each function checks its pointers and sizes,
// calls the C++ code and turns its Status into a tkv_status and message.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include <nlohmann/json.hpp>

#include "attention/attention.h"
#include "capi/capi_common.h"
#include "codec/calibrated.h"
#include "codec/codebook.h"
#include "codec/rotation.h"
#include "eval/kv_stats.h"

static_assert(TKV_DEFAULT_SEED == tkv::kDefaultSeed, "the header's default seed is the tools' one");
#ifdef TKV_PROJECT_VERSION_MAJOR
static_assert(TKV_VERSION_MAJOR == TKV_PROJECT_VERSION_MAJOR && TKV_VERSION_MINOR == TKV_PROJECT_VERSION_MINOR &&
                  TKV_VERSION_PATCH == TKV_PROJECT_VERSION_PATCH,
              "include/turbokv.h's TKV_VERSION_* must equal CMakeLists.txt's project(VERSION)");
#endif

namespace tkv::capi {
namespace {
thread_local std::string g_error;
}  // namespace

tkv_status fail(tkv_status s, std::string message) {
  g_error = std::move(message);
  return s;
}

tkv_status file_error(const std::string& path, tkv_status otherwise) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return TKV_ERR_IO;
  ::close(fd);
  return otherwise;
}

tkv_status cache_options(const char* fn, const char* type_k, const char* type_v, int32_t mean_center,
                         const char* preset, const char* policy_path, int n_layer, const tkv::Model* model,
                         KvCacheOptions& co) {
  const std::string f = fn;
  if (!type_k || !type_v) return fail(TKV_ERR_ARGUMENT, f + ": type_k and type_v must name formats (not NULL)");
  if (preset && policy_path) return fail(TKV_ERR_ARGUMENT, f + ": give a preset or a policy_path, not both");
  co.type_k = type_k;
  co.type_v = type_v;
  co.mean_center = mean_center != 0;
  const uint64_t fingerprint = policy_path && model ? model->fingerprint() : 0;
  Status s = apply_kv_policy_or_preset(policy_path ? policy_path : "", preset ? preset : "", n_layer, fingerprint, co);
  if (!s.ok()) return fail(policy_path ? file_error(policy_path, TKV_ERR_FORMAT) : TKV_ERR_ARGUMENT, f + ": " + s.message());
  return TKV_OK;
}

int resolve_threads(int32_t threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace tkv::capi

using namespace tkv;
using capi::fail;
using capi::guard;
using capi::null_arg;

extern "C" {

const char* tkv_last_error(void) { return capi::g_error.c_str(); }

const char* tkv_status_name(tkv_status s) {
  switch (s) {
    case TKV_OK: return "TKV_OK";
    case TKV_ERR_ARGUMENT: return "TKV_ERR_ARGUMENT";
    case TKV_ERR_BUFFER: return "TKV_ERR_BUFFER";
    case TKV_ERR_IO: return "TKV_ERR_IO";
    case TKV_ERR_FORMAT: return "TKV_ERR_FORMAT";
    case TKV_ERR_VALUE: return "TKV_ERR_VALUE";
    case TKV_ERR_MEMORY: return "TKV_ERR_MEMORY";
    case TKV_ERR_STOPPED: return "TKV_ERR_STOPPED";
    case TKV_ERR_INTERNAL: return "TKV_ERR_INTERNAL";
  }
  return "TKV_ERR_UNKNOWN";
}

#define TKV_STR2(x) #x
#define TKV_STR(x) TKV_STR2(x)
const char* tkv_version(void) {
  return TKV_STR(TKV_VERSION_MAJOR) "." TKV_STR(TKV_VERSION_MINOR) "." TKV_STR(TKV_VERSION_PATCH);
}

// ------------------------------------------------------------------ codecs

tkv_status tkv_codec_create(const char* format, int32_t head_dim, uint64_t seed, tkv_codec** out) {
  const char* fn = "tkv_codec_create";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    if (!format) return null_arg(fn, "format");
    if (is_calibrated_format(format))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + format +
                                        " is a calibrated format: make it from rows with tkv_codec_calibrate");
    auto c = make_codec(format, head_dim, seed);
    if (!c) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + c.error());
    auto h = std::make_unique<tkv_codec>();
    h->codec = std::move(*c);
    h->format = format;
    *out = h.release();
    return TKV_OK;
  });
}

tkv_status tkv_codec_calibrate(const char* format, int32_t head_dim, const float* rows, size_t n_rows,
                               tkv_codec** out) {
  const char* fn = "tkv_codec_calibrate";
  return guard(fn, [&] {
    if (!out) return null_arg(fn, "out");
    *out = nullptr;
    if (!format) return null_arg(fn, "format");
    if (!rows) return null_arg(fn, "rows");
    if (!is_calibrated_format(format))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": '" + format + "' is not a calibrated format (tqcB)");
    if (head_dim < 8 || head_dim > 1024)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": head_dim " + std::to_string(head_dim) + " is outside [8, 1024]");
    auto basis = fit_head_basis(rows, n_rows, head_dim);
    if (!basis) return fail(TKV_ERR_VALUE, std::string(fn) + ": " + basis.error());
    auto c = make_calibrated_codec(format, *basis);
    if (!c) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + c.error());
    auto h = std::make_unique<tkv_codec>();
    h->codec = std::move(*c);
    h->format = format;
    h->mean = basis->mean;
    *out = h.release();
    return TKV_OK;
  });
}

void tkv_codec_free(tkv_codec* codec) { delete codec; }
const char* tkv_codec_format(const tkv_codec* c) { return c ? c->format.c_str() : ""; }
int32_t tkv_codec_head_dim(const tkv_codec* c) { return c ? c->codec->dim() : 0; }
size_t tkv_codec_row_bytes(const tkv_codec* c) { return c ? c->codec->row_bytes() : 0; }
double tkv_codec_bits_per_value(const tkv_codec* c) { return c ? c->codec->bits_per_value() : 0.0; }

tkv_status tkv_codec_mean(const tkv_codec* c, float* mean, size_t n) {
  const char* fn = "tkv_codec_mean";
  return guard(fn, [&] {
    if (!c) return null_arg(fn, "codec");
    if (!mean) return null_arg(fn, "mean");
    const size_t d = static_cast<size_t>(c->codec->dim());
    if (n < d) return fail(TKV_ERR_BUFFER, std::string(fn) + ": mean holds " + std::to_string(n) + " floats, " +
                                               std::to_string(d) + " needed");
    for (size_t i = 0; i < d; ++i) mean[i] = c->mean.empty() ? 0.0f : c->mean[i];
    return TKV_OK;
  });
}

tkv_status tkv_codec_quantize(const tkv_codec* c, const float* x, size_t n_rows, uint8_t* out, size_t out_bytes) {
  const char* fn = "tkv_codec_quantize";
  return guard(fn, [&] {
    if (!c) return null_arg(fn, "codec");
    if (n_rows == 0) return TKV_OK;
    if (!x) return null_arg(fn, "x");
    if (!out) return null_arg(fn, "out");
    size_t need = 0;
    if (!capi::mul_ok(n_rows, c->codec->row_bytes(), need) || out_bytes < need)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(out_bytes) + " bytes, " +
                                      std::to_string(n_rows) + " rows of " + c->format + " need " +
                                      std::to_string(n_rows) + " x " + std::to_string(c->codec->row_bytes()));
    Status s = c->codec->quantize(x, n_rows, out);
    if (!s.ok()) return fail(TKV_ERR_VALUE, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

tkv_status tkv_codec_dequantize(const tkv_codec* c, const uint8_t* codes, size_t n_rows, float* out,
                                size_t out_floats) {
  const char* fn = "tkv_codec_dequantize";
  return guard(fn, [&] {
    if (!c) return null_arg(fn, "codec");
    if (n_rows == 0) return TKV_OK;
    if (!codes) return null_arg(fn, "codes");
    if (!out) return null_arg(fn, "out");
    size_t need = 0;
    if (!capi::mul_ok(n_rows, static_cast<size_t>(c->codec->dim()), need) || out_floats < need)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(out_floats) + " floats, " +
                                      std::to_string(n_rows) + " rows of d = " + std::to_string(c->codec->dim()) +
                                      " need more");
    c->codec->dequantize(codes, n_rows, out);
    return TKV_OK;
  });
}

tkv_status tkv_rotate(int32_t head_dim, uint64_t seed, const float* x, size_t n_rows, int32_t inverse, float* out,
                      size_t out_floats) {
  const char* fn = "tkv_rotate";
  return guard(fn, [&] {
    if (head_dim < 2 || head_dim > 4096)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": head_dim must be in [2, 4096], got " + std::to_string(head_dim));
    if (n_rows == 0) return TKV_OK;
    if (!x) return null_arg(fn, "x");
    if (!out) return null_arg(fn, "out");
    size_t need = 0;
    if (!capi::mul_ok(n_rows, size_t(head_dim), need) || out_floats < need)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(out_floats) + " floats, " +
                                      std::to_string(n_rows) + " x " + std::to_string(head_dim) + " needed");
    if (out < x + need && x < out + need) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": out overlaps x");
    auto r = Rotation::make(head_dim, seed);
    if (!r) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + r.error());
    for (size_t i = 0; i < n_rows; ++i) {
      if (inverse)
        (*r)->inverse(x + i * size_t(head_dim), out + i * size_t(head_dim));
      else
        (*r)->forward(x + i * size_t(head_dim), out + i * size_t(head_dim));
    }
    return TKV_OK;
  });
}

tkv_status tkv_codebook(int32_t d, int32_t bits, double* centroids, size_t n_centroids, double* boundaries,
                        size_t n_boundaries, double* mse_coord) {
  const char* fn = "tkv_codebook";
  return guard(fn, [&] {
    if (d < 2 || d > 65536) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": d " + std::to_string(d) + " is outside [2, 65536]");
    if (bits < 1 || bits > 8) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": bits " + std::to_string(bits) + " is outside [1, 8]");
    const size_t k = size_t{1} << bits;
    if (centroids && n_centroids < k)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": centroids holds " + std::to_string(n_centroids) + ", " +
                                      std::to_string(k) + " needed");
    if (boundaries && n_boundaries < k - 1)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": boundaries holds " + std::to_string(n_boundaries) + ", " +
                                      std::to_string(k - 1) + " needed");
    const Codebook& cb = lloyd_max(d, bits);
    if (centroids) std::copy(cb.centroids.begin(), cb.centroids.end(), centroids);
    if (boundaries) std::copy(cb.boundaries.begin(), cb.boundaries.end(), boundaries);
    if (mse_coord) *mse_coord = cb.mse_coord;
    return TKV_OK;
  });
}

// --------------------------------------------------------------- attention

tkv_attention_params tkv_attention_default_params(void) {
  tkv_attention_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.n_q = p.n_q_heads = p.n_kv_heads = 1;
  p.causal_offset = -1;
  p.threads = 1;
  return p;
}

namespace {

// K or V rows of the C arguments as the kernel's KvRows; checks that every
// row the kernel may read lies inside the caller's bytes.
tkv_status kv_rows(const char* fn, const char* which, const tkv_codec* codec, const tkv_codec* const* heads,
                   const uint8_t* codes, size_t bytes, size_t ts, size_t hs, int n_kv, int n_kv_heads,
                   std::vector<const Codec*>& head_ptrs, KvRows& r) {
  const std::string f = std::string(fn) + ": " + which;
  if (!codec && !heads) return fail(TKV_ERR_ARGUMENT, f + " codec is NULL (give a codec or per-head codecs)");
  if (heads) {
    for (int h = 0; h < n_kv_heads; ++h) {
      if (!heads[h]) return fail(TKV_ERR_ARGUMENT, f + " head codec " + std::to_string(h) + " is NULL");
      head_ptrs.push_back(heads[h]->codec.get());
    }
    codec = heads[0];
  }
  r.codec = codec->codec.get();
  r.heads = heads ? head_ptrs.data() : nullptr;
  r.data = codes;
  const size_t rb = r.codec->row_bytes();
  r.token_stride = ts ? ts : size_t(n_kv_heads) * rb;
  r.head_stride = hs ? hs : rb;
  if (n_kv > 0) {
    if (!codes) return fail(TKV_ERR_ARGUMENT, f + " codes are NULL");
    size_t a = 0, b = 0;
    if (!capi::mul_ok(size_t(n_kv - 1), r.token_stride, a) || !capi::mul_ok(size_t(n_kv_heads - 1), r.head_stride, b) ||
        a + b + rb < a || a + b + rb > bytes)
      return fail(TKV_ERR_BUFFER, f + " codes hold " + std::to_string(bytes) + " bytes; " + std::to_string(n_kv) +
                                      " tokens x " + std::to_string(n_kv_heads) + " heads of " + std::to_string(rb) +
                                      "-byte rows at these strides need more");
  }
  return TKV_OK;
}

}  // namespace

tkv_status tkv_attention(const tkv_attention_params* pp) {
  const char* fn = "tkv_attention";
  return guard(fn, [&] {
    if (!pp) return null_arg(fn, "params");
    tkv_attention_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_attention_default_params(), p)) return s;
    if (!p.q) return null_arg(fn, "q");
    if (!p.out) return null_arg(fn, "out");
    if (p.n_q < 1 || p.n_q_heads < 1 || p.n_kv_heads < 1 || p.n_kv < 0 || p.head_dim < 1)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": bad shape: n_q " + std::to_string(p.n_q) + ", n_q_heads " +
                                        std::to_string(p.n_q_heads) + ", n_kv " + std::to_string(p.n_kv) +
                                        ", n_kv_heads " + std::to_string(p.n_kv_heads) + ", head_dim " +
                                        std::to_string(p.head_dim));
    const size_t need = size_t(p.n_q) * size_t(p.n_q_heads) * size_t(p.head_dim);
    if (p.out_floats < need)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": out holds " + std::to_string(p.out_floats) + " floats, " +
                                      std::to_string(need) + " needed");
    std::vector<const Codec*> kh, vh;
    AttentionArgs a;
    if (tkv_status s = kv_rows(fn, "K", p.k_codec, p.k_head_codecs, p.k_codes, p.k_codes_bytes, p.k_token_stride,
                               p.k_head_stride, p.n_kv, p.n_kv_heads, kh, a.k))
      return s;
    if (tkv_status s = kv_rows(fn, "V", p.v_codec, p.v_head_codecs, p.v_codes, p.v_codes_bytes, p.v_token_stride,
                               p.v_head_stride, p.n_kv, p.n_kv_heads, vh, a.v))
      return s;
    a.q = p.q;
    a.n_q = p.n_q;
    a.n_q_heads = p.n_q_heads;
    a.n_kv = p.n_kv;
    a.n_kv_heads = p.n_kv_heads;
    a.d = p.head_dim;
    a.causal_offset = p.causal_offset;
    if (!(p.scale >= 0.0f) || !std::isfinite(p.scale))
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": scale must be finite and >= 0 (0: 1/sqrt(head_dim))");
    a.scale = p.scale;
    a.mu_k = p.mu_k;
    a.mu_v = p.mu_v;
    a.threads = p.threads;
    a.sparse_v = p.sparse_v;
    if (p.key_scoring < 0 || p.key_scoring > 2)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": key_scoring must be 0 (default), 1 (exact) or 2 (int8), not " +
                                        std::to_string(p.key_scoring));
    a.keys = p.key_scoring == 1 ? KeyScoring::kExact : p.key_scoring == 2 ? KeyScoring::kInt8 : KeyScoring::kDefault;
    a.out = p.out;
    Status s = attention(a);
    if (!s.ok()) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + s.message());
    return TKV_OK;
  });
}

// ----------------------------------------------------------------- kv-stats

tkv_kv_stats_params tkv_kv_stats_default_params(void) {
  tkv_kv_stats_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.formats = "all";
  p.source = "array";
  p.mean_center = 1;
  p.queries = 64;
  p.seed = kDefaultSeed;
  return p;
}

tkv_status tkv_kv_stats(const float* x, int32_t n_heads, int32_t n_tokens, int32_t head_dim,
                        const tkv_kv_stats_params* pp, char* json, size_t cap, size_t* json_len) {
  const char* fn = "tkv_kv_stats";
  return guard(fn, [&] {
    tkv_kv_stats_params p;
    if (tkv_status s = capi::read_params(fn, "params", pp, tkv_kv_stats_default_params(), p)) return s;
    if (!x) return null_arg(fn, "x");
    if (!json_len) return null_arg(fn, "json_len");
    if (!p.formats || !p.source) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": formats and source must not be NULL");
    if (n_heads < 1 || n_tokens < 1 || head_dim < 1)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": bad shape " + std::to_string(n_heads) + " heads x " +
                                        std::to_string(n_tokens) + " tokens x " + std::to_string(head_dim));
    if (p.queries < 1 || p.queries > 4096)
      return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": queries " + std::to_string(p.queries) + " is outside [1, 4096]");
    auto formats = parse_format_list(p.formats);
    if (!formats) return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + formats.error());
    KvFile kv;
    kv.kv_heads = static_cast<uint32_t>(n_heads);
    kv.tokens = static_cast<uint32_t>(n_tokens);
    kv.head_dim = static_cast<uint32_t>(head_dim);
    kv.data.assign(x, x + kv.values());
    KvStatsOptions o;
    o.formats = *formats;
    o.seed = p.seed;
    o.queries = p.queries;
    o.centered = p.mean_center != 0;
    o.calibrated = p.calibrated != 0;
    auto rows = kv_stats(kv, p.source, o);
    if (!rows) return fail(TKV_ERR_VALUE, std::string(fn) + ": " + rows.error());
    const std::string text =
        kv_stats_json(*rows).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    *json_len = text.size();
    if (!json || cap < text.size() + 1)
      return fail(TKV_ERR_BUFFER, std::string(fn) + ": json holds " + std::to_string(cap) + " bytes, " +
                                      std::to_string(text.size() + 1) + " needed");
    std::memcpy(json, text.c_str(), text.size() + 1);
    return TKV_OK;
  });
}

}  // extern "C"
