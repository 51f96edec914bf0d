#include "cache/kv_policy.h"

#include <cstring>
#include <fstream>

#include <xxhash.h>

#include "util/atomic_file.h"
#include "util/hash.h"

namespace tkv {
namespace {

constexpr char kMagic[8] = {'T', 'K', 'V', 'P', 'O', 'L', 'C', 'Y'};
// Version 2 adds the protected tokens after the description; version 1
// files (no protected tokens) are still read.
constexpr uint32_t kVersion = 2;

struct Writer {
  std::string buf;
  template <class T>
  void put(T v) { buf.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf += s;
  }
  void floats(const std::vector<float>& v) { buf.append(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
};

struct Reader {
  const std::string& buf;
  size_t pos = 0;
  std::string err;
  bool need(size_t n, const char* what) {
    if (err.empty() && buf.size() - pos < n)
      err = std::string("truncated at byte ") + std::to_string(pos) + " reading " + what;
    return err.empty();
  }
  template <class T>
  T get(const char* what) {
    T v{};
    if (need(sizeof(T), what)) { std::memcpy(&v, buf.data() + pos, sizeof(T)); pos += sizeof(T); }
    return v;
  }
  std::string str(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    if (n > 4096 && err.empty()) err = std::string(what) + " length " + std::to_string(n) + " is absurd";
    if (!need(n, what)) return {};
    std::string s = buf.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<float> floats(size_t n, const char* what) {
    std::vector<float> v;
    if (!need(n * 4, what)) return v;
    v.resize(n);
    std::memcpy(v.data(), buf.data() + pos, n * 4);
    pos += n * 4;
    return v;
  }
};

}  // namespace

Expected<double> KvPolicy::bits_per_value() const {
  double sum = 0;
  int n = 0;
  for (const auto* list : {&k, &v})
    for (const auto& e : *list) {
      double bpv;
      if (is_calibrated_format(e.format)) {
        if (e.heads.empty()) return Status::Error("policy entry " + e.format + " has no calibration");
        auto c = make_calibrated_codec(e.format, e.heads[0]);
        if (!c) return c.status();
        bpv = (*c)->bits_per_value();
      } else {
        auto c = make_codec(e.format, head_dim);
        if (!c) return c.status();
        bpv = (*c)->bits_per_value();
      }
      sum += bpv;
      ++n;
    }
  return n ? sum / n : 0.0;
}

uint64_t KvPolicy::fingerprint() const {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  const int32_t shape[3] = {n_layer, n_kv_heads, head_dim};
  XXH64_update(st, &model, 8);
  XXH64_update(st, shape, sizeof(shape));
  for (const auto* list : {&k, &v})
    for (const KvPolicyEntry& e : *list) {
      const uint32_t n = static_cast<uint32_t>(e.format.size());
      XXH64_update(st, &n, 4);
      XXH64_update(st, e.format.data(), n);
      for (const HeadBasis& h : e.heads)
        for (const std::vector<float>* f : {&h.mean, &h.var, &h.basis}) XXH64_update(st, f->data(), f->size() * 4);
    }
  const uint64_t r = XXH64_digest(st);
  XXH64_freeState(st);
  return r;
}

Status write_kv_policy(const std::string& path, const KvPolicy& p) {
  if (p.k.size() != static_cast<size_t>(p.n_layer) || p.v.size() != static_cast<size_t>(p.n_layer))
    return Status::Error("kv policy: " + std::to_string(p.k.size()) + " K and " + std::to_string(p.v.size()) +
                         " V entries for " + std::to_string(p.n_layer) + " layers");
  Writer w;
  w.buf.append(kMagic, 8);
  w.put<uint32_t>(kVersion);
  w.put<uint64_t>(p.model);
  w.put<uint32_t>(p.n_layer);
  w.put<uint32_t>(p.n_kv_heads);
  w.put<uint32_t>(p.head_dim);
  w.put<double>(p.budget);
  w.str(p.source);
  w.put<uint32_t>(static_cast<uint32_t>(p.protect_sinks));
  w.put<uint32_t>(static_cast<uint32_t>(p.protect_recent));
  w.str(p.protect_type);
  const size_t d = static_cast<size_t>(p.head_dim);
  for (int l = 0; l < p.n_layer; ++l)
    for (const KvPolicyEntry* e : {&p.k[l], &p.v[l]}) {
      w.str(e->format);
      if (e->heads.size() != static_cast<size_t>(p.n_kv_heads))
        return Status::Error("kv policy: layer " + std::to_string(l) + " has " + std::to_string(e->heads.size()) +
                             " head calibrations, expected " + std::to_string(p.n_kv_heads));
      for (const HeadBasis& h : e->heads) {
        if (h.mean.size() != d || h.var.size() != d || h.basis.size() != d * d)
          return Status::Error("kv policy: layer " + std::to_string(l) + ": calibration size does not match d");
        w.floats(h.mean);
        w.floats(h.var);
        w.floats(h.basis);
      }
    }
  w.put<uint64_t>(fnv1a(w.buf.data(), w.buf.size()));
  if (Status s = write_file_atomic(path, w.buf.data(), w.buf.size()); !s.ok()) return Status::Error("kv policy: " + s.message());
  return Status::Ok();
}

Expected<KvPolicy> read_kv_policy(const std::string& path, uint64_t model) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::Error("cannot open KV policy " + path);
  // The magic before anything else (a GGUF passed by mistake is not read in).
  const std::streamoff size = f.tellg();
  char magic[8] = {};
  f.seekg(0);
  f.read(magic, 8);
  if (size < 16 || !f || std::memcmp(magic, kMagic, 8) != 0)
    return Status::Error("KV policy " + path + ": not a turbokv policy file (bad magic)");
  std::string buf(static_cast<size_t>(size), '\0');
  f.seekg(0);
  f.read(buf.data(), size);
  if (!f) return Status::Error("KV policy " + path + ": read failed");
  auto p = parse_kv_policy(buf, model);
  if (!p) return Status::Error("KV policy " + path + ": " + p.error());
  return p;
}

Expected<KvPolicy> parse_kv_policy(const std::string& buf, uint64_t model) {
  auto bad = [](const std::string& m) { return Status::Error(m); };
  if (buf.size() < 16 || std::memcmp(buf.data(), kMagic, 8) != 0) return bad("not a turbokv policy file (bad magic)");
  uint64_t sum;
  std::memcpy(&sum, buf.data() + buf.size() - 8, 8);
  Reader r{buf, 0, {}};
  r.pos = 8;
  const uint32_t version = r.get<uint32_t>("version");
  if (r.err.empty() && version != kVersion && version != 1)
    return bad("version " + std::to_string(version) + " is not supported (this build reads " +
               std::to_string(kVersion) + ")");
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION  // the fuzzer reads past checksums
  if (fnv1a(buf.data(), buf.size() - 8) != sum) return bad("checksum mismatch (the file is truncated or corrupted)");
#else
  (void)sum;
#endif
  KvPolicy p;
  p.model = r.get<uint64_t>("model fingerprint");
  p.n_layer = static_cast<int>(r.get<uint32_t>("n_layer"));
  p.n_kv_heads = static_cast<int>(r.get<uint32_t>("n_kv_heads"));
  p.head_dim = static_cast<int>(r.get<uint32_t>("head_dim"));
  p.budget = r.get<double>("budget");
  p.source = r.str("source");
  if (version >= 2) {
    const uint32_t sinks = r.get<uint32_t>("protected sinks"), recent = r.get<uint32_t>("protected recent tokens");
    p.protect_type = r.str("protected format");
    if (r.err.empty() && (sinks > (1u << 20) || recent > (1u << 20)))
      return bad("protected tokens (sinks " + std::to_string(sinks) + ", recent " + std::to_string(recent) +
                 ") out of range");
    p.protect_sinks = static_cast<int>(sinks);
    p.protect_recent = static_cast<int>(recent);
  }
  if (!r.err.empty()) return bad(r.err);

  if (p.n_layer < 1 || p.n_layer > 4096 || p.n_kv_heads < 1 || p.n_kv_heads > 1024 || p.head_dim < 1 ||
      p.head_dim > 1024)
    return bad("absurd shape: " + std::to_string(p.n_layer) + " layers, " + std::to_string(p.n_kv_heads) +
               " KV heads, head dim " + std::to_string(p.head_dim));
  if (p.protect_sinks > 0 || p.protect_recent > 0)
    if (auto c = make_codec(p.protect_type, p.head_dim); !c) return bad("protected tokens' format: " + c.error());
  if (model != 0 && p.model != model)
    return bad("calibrated for another model (fingerprint " + std::to_string(p.model) + ", this model " +
               std::to_string(model) + "); run turbokv calibrate on this model");
  const size_t d = static_cast<size_t>(p.head_dim);
  p.k.resize(p.n_layer);
  p.v.resize(p.n_layer);
  for (int l = 0; l < p.n_layer && r.err.empty(); ++l)
    for (KvPolicyEntry* e : {&p.k[l], &p.v[l]}) {
      e->format = r.str("format");
      e->heads.resize(p.n_kv_heads);
      for (HeadBasis& h : e->heads) {
        h.d = p.head_dim;
        h.mean = r.floats(d, "mean");
        h.var = r.floats(d, "variances");
        h.basis = r.floats(d * d, "basis");
      }
      if (!r.err.empty()) break;
      if (is_calibrated_format(e->format)) {
        auto c = make_calibrated_codec(e->format, e->heads[0]);
        if (!c) return bad("layer " + std::to_string(l) + ": " + c.error());
      } else {
        auto c = make_codec(e->format, p.head_dim);
        if (!c) return bad("layer " + std::to_string(l) + ": " + c.error());
      }
    }
  if (!r.err.empty()) return bad(r.err);
  if (r.pos != buf.size() - 8) return bad(std::to_string(buf.size() - 8 - r.pos) + " unexpected bytes before the checksum");
  return p;
}

}  // namespace tkv
