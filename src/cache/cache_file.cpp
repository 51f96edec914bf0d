#include "cache/cache_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "codec/calibrated.h"
#include "util/atomic_file.h"

namespace tkv {

namespace {

constexpr char kMagic[8] = {'T', 'K', 'V', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kVersion = 1;
// Bounds on header fields, checked before anything is sized by them.
constexpr uint32_t kMaxHeaderLen = 1u << 22;
constexpr int kMaxLayers = 4096, kMaxHeads = 1024, kMaxHeadDim = 1024;
constexpr int kMaxTokens = 1 << 30;
constexpr size_t kChunk = size_t(1) << 18;  // read and hash 256 KiB at a time (still in L2 for the hash)

// A build for fuzzing reads past checksums, so that the fuzzer reaches the
// checks behind them (libFuzzer's convention).
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kCheckSums = false;
#else
constexpr bool kCheckSums = true;
#endif

class FileSource final : public ByteSource {
 public:
  FileSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  Status read(uint64_t offset, void* dst, size_t n) const override {
    if (offset > size_ || n > size_ - offset)
      return Status::Error("truncated: " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                           " are past the end of the file (" + std::to_string(size_) + " bytes)");
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, std::min<size_t>(n, size_t(1) << 30), static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return Status::Error("read failed at offset " + std::to_string(offset) + ": " +
                                       (r < 0 ? std::strerror(errno) : "unexpected end of file"));
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

 private:
  int fd_;
  uint64_t size_;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const void* d, size_t n) : d_(static_cast<const uint8_t*>(d)), n_(n) {}
  uint64_t size() const override { return n_; }
  Status read(uint64_t offset, void* dst, size_t n) const override {
    if (offset > n_ || n > n_ - offset)
      return Status::Error("truncated: " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                           " are past the end of the data (" + std::to_string(n_) + " bytes)");
    if (n) std::memcpy(dst, d_ + offset, n);
    return Status::Ok();
  }

 private:
  const uint8_t* d_;
  size_t n_;
};

std::string state_name(CacheLayerState s) {
  switch (s) {
    case CacheLayerState::kPlain: return "plain";
    case CacheLayerState::kStaging: return "staging (f16 rows)";
    case CacheLayerState::kCentred: return "centred";
  }
  return "?";
}

// Row bytes of a format at head dim d, without a calibration for tqc names.
Expected<size_t> format_row_bytes(const std::string& name, int d) {
  if (is_calibrated_format(name)) {
    auto b = calibrated_bits(name, d);
    if (!b) return b.status();
    return size_t(2) + static_cast<size_t>(std::lround(*b * d)) / 8;
  }
  auto c = make_codec(name, d);
  if (!c) return c.status();
  return (*c)->row_bytes();
}

struct Put {
  std::string buf;
  template <class T>
  void put(T v) { buf.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
};

// Payload bytes of one layer's section.
uint64_t layer_bytes(CacheLayerState st, int H, int d, int n, size_t rb_k, size_t rb_v) {
  uint64_t b = st == CacheLayerState::kCentred ? uint64_t(2) * H * d * 4 : 0;
  if (st == CacheLayerState::kStaging) rb_k = rb_v = size_t(2) * d;
  return b + uint64_t(H) * n * (rb_k + rb_v);
}

// Reads n bytes at off into dst, feeding them to the hash as they arrive.
Status read_hashed(const ByteSource& src, uint64_t off, uint8_t* dst, uint64_t n, XXH64_state_t* h) {
  while (n > 0) {
    const size_t c = static_cast<size_t>(std::min<uint64_t>(n, kChunk));
    if (Status s = src.read(off, dst, c); !s.ok()) return s;
    XXH64_update(h, dst, c);
    off += c;
    dst += c;
    n -= c;
  }
  return Status::Ok();
}

struct HashState {
  XXH64_state_t* s = XXH64_createState();
  HashState() { XXH64_reset(s, 0); }
  ~HashState() { XXH64_freeState(s); }
  HashState(const HashState&) = delete;
  HashState& operator=(const HashState&) = delete;
};

Status check_sum(const ByteSource& src, uint64_t off, uint64_t got, const std::string& what) {
  uint64_t want = 0;
  if (Status s = src.read(off, &want, 8); !s.ok()) return Status::Error(what + " checksum: " + s.message());
  if (kCheckSums && want != got)
    return Status::Error(what + ": checksum mismatch (the file is corrupted)");
  return Status::Ok();
}

// Section k's length field must say what the header implies.
Status check_len(const ByteSource& src, uint64_t off, uint64_t want, const std::string& what) {
  uint64_t len = 0;
  if (Status s = src.read(off, &len, 8); !s.ok()) return Status::Error(what + " length: " + s.message());
  if (len != want)
    return Status::Error(what + ": length field says " + std::to_string(len) + " bytes, the header implies " +
                         std::to_string(want));
  return Status::Ok();
}

std::string layer_what(int l) { return "layer " + std::to_string(l) + " section"; }

}  // namespace

Expected<std::unique_ptr<ByteSource>> open_file_source(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + " is not a regular file");
  }
  return std::unique_ptr<ByteSource>(new FileSource(fd, static_cast<uint64_t>(st.st_size)));
}

std::unique_ptr<ByteSource> open_fd_source(int fd, uint64_t size) {
  return std::unique_ptr<ByteSource>(new FileSource(fd, size));
}

std::unique_ptr<ByteSource> memory_source(const void* data, size_t n) {
  return std::unique_ptr<ByteSource>(new MemorySource(data, n));
}

Expected<CacheFileHeader> read_cache_header(const ByteSource& src) {
  uint8_t fixed[16];
  if (src.size() < 16 + 8 || !src.read(0, fixed, 16).ok() || std::memcmp(fixed, kMagic, 8) != 0)
    return Status::Error("not a turbokv cache file (bad magic)");
  CacheFileHeader h;
  uint32_t len = 0;
  std::memcpy(&h.version, fixed + 8, 4);
  std::memcpy(&len, fixed + 12, 4);
  if (h.version != kVersion)
    return Status::Error("format version " + std::to_string(h.version) + " is not supported (this build reads version " +
                         std::to_string(kVersion) + ")");
  if (len > kMaxHeaderLen) return Status::Error("header length " + std::to_string(len) + " is absurd");
  if (uint64_t(16) + len + 8 > src.size())
    return Status::Error("truncated: the header needs " + std::to_string(16 + len + 8) + " bytes, the file has " +
                         std::to_string(src.size()));
  std::string buf(16 + len, '\0');
  if (Status s = src.read(0, buf.data(), buf.size()); !s.ok()) return s;
  if (Status s = check_sum(src, buf.size(), XXH64(buf.data(), buf.size(), 0), "header"); !s.ok()) return s;
  h.header_bytes = buf.size() + 8;
  size_t pos = 16;
  std::string err;
  auto get = [&](auto& v, const char* what) {
    if (!err.empty()) return;
    if (buf.size() - pos < sizeof(v)) { err = std::string("header ends inside ") + what; return; }
    std::memcpy(&v, buf.data() + pos, sizeof(v));
    pos += sizeof(v);
  };
  uint32_t n_layer = 0, heads = 0, d = 0, tokens = 0, mrows = 0;
  get(h.model, "model fingerprint");
  get(h.policy, "policy fingerprint");
  get(h.seed, "seed");
  get(n_layer, "n_layer");
  get(heads, "n_kv_heads");
  get(d, "head_dim");
  get(tokens, "n_tokens");
  get(mrows, "mean_rows");
  if (!err.empty()) return Status::Error(err);
  if (n_layer < 1 || n_layer > kMaxLayers) return Status::Error("n_layer " + std::to_string(n_layer) + " is absurd");
  if (heads < 1 || heads > kMaxHeads) return Status::Error("n_kv_heads " + std::to_string(heads) + " is absurd");
  if (d < 8 || d > kMaxHeadDim) return Status::Error("head_dim " + std::to_string(d) + " is absurd (8..1024)");
  if (tokens > kMaxTokens) return Status::Error("n_tokens " + std::to_string(tokens) + " is absurd");
  if (mrows > kMaxTokens) return Status::Error("mean_rows " + std::to_string(mrows) + " is absurd");
  h.n_layer = int(n_layer);
  h.n_kv_heads = int(heads);
  h.head_dim = int(d);
  h.n_tokens = int(tokens);
  h.mean_rows = int(mrows);
  for (int l = 0; l < h.n_layer && err.empty(); ++l) {
    uint8_t st = 0;
    get(st, "layer state");
    if (err.empty() && st > 2) err = "layer " + std::to_string(l) + ": state " + std::to_string(st) + " is not 0, 1 or 2";
    h.state.push_back(static_cast<CacheLayerState>(st));
    for (auto* names : {&h.type_k, &h.type_v}) {
      uint8_t n = 0;
      get(n, "format name length");
      if (err.empty() && (n == 0 || buf.size() - pos < n))
        err = "layer " + std::to_string(l) + ": format name of " + std::to_string(n) + " bytes does not fit the header";
      if (!err.empty()) break;
      names->emplace_back(buf.data() + pos, n);
      pos += n;
    }
  }
  if (!err.empty()) return Status::Error(err);
  if (pos != buf.size()) return Status::Error(std::to_string(buf.size() - pos) + " unexpected bytes at the end of the header");
  // Sizes of every section, from the formats (their names are checked here,
  // and a layer's state against the token count and mean rows).
  h.section_bytes.push_back(uint64_t(4) * h.n_tokens);
  std::map<std::string, size_t> rb;
  for (int l = 0; l < h.n_layer; ++l) {
    size_t r[2];
    for (int kv = 0; kv < 2; ++kv) {
      const std::string& name = kv ? h.type_v[l] : h.type_k[l];
      auto it = rb.find(name);
      if (it == rb.end()) {
        auto b = format_row_bytes(name, h.head_dim);
        if (!b) return Status::Error("layer " + std::to_string(l) + (kv ? " V" : " K") + ": " + b.error());
        it = rb.emplace(name, *b).first;
      }
      r[kv] = it->second;
    }
    const CacheLayerState st = h.state[l];
    if (st == CacheLayerState::kStaging && (h.mean_rows == 0 || h.n_tokens >= h.mean_rows || h.n_tokens == 0))
      return Status::Error("layer " + std::to_string(l) + " is staging with " + std::to_string(h.n_tokens) +
                           " tokens and mean rows " + std::to_string(h.mean_rows));
    h.section_bytes.push_back(layer_bytes(st, h.n_kv_heads, h.head_dim, h.n_tokens, r[0], r[1]));
    if (st != CacheLayerState::kStaging) h.row_payload_bytes += uint64_t(h.n_kv_heads) * h.n_tokens * (r[0] + r[1]);
    else h.row_payload_bytes += uint64_t(h.n_kv_heads) * h.n_tokens * 4 * h.head_dim;
  }
  h.file_bytes = h.header_bytes;
  for (uint64_t b : h.section_bytes) h.file_bytes += 16 + b;
  return h;
}

Status verify_cache_file(const ByteSource& src, CacheFileHeader* out) {
  auto h = read_cache_header(src);
  if (!h) return h.status();
  if (src.size() != h->file_bytes)
    return Status::Error((src.size() < h->file_bytes ? "truncated: " : "trailing bytes: ") + std::string("the file has ") +
                         std::to_string(src.size()) + " bytes, the header describes " + std::to_string(h->file_bytes));
  std::vector<uint8_t> scratch(kChunk);
  uint64_t off = h->header_bytes;
  for (size_t k = 0; k < h->section_bytes.size(); ++k) {
    const std::string what = k == 0 ? std::string("token section") : layer_what(int(k) - 1);
    if (Status s = check_len(src, off, h->section_bytes[k], what); !s.ok()) return s;
    off += 8;
    HashState hs;
    for (uint64_t left = h->section_bytes[k]; left > 0;) {
      const size_t c = static_cast<size_t>(std::min<uint64_t>(left, kChunk));
      if (Status s = read_hashed(src, off, scratch.data(), c, hs.s); !s.ok()) return Status::Error(what + ": " + s.message());
      off += c;
      left -= c;
    }
    if (Status s = check_sum(src, off, XXH64_digest(hs.s), what); !s.ok()) return s;
    off += 8;
  }
  if (out) *out = std::move(*h);
  return Status::Ok();
}

namespace {
// A file holds every token's rows of every layer; a ring (sliding-window
// layers) has dropped the old ones and a recurrent state is no rows at all.
Status kept_in_files(const KvCache& c) {
  if (c.layout().has_windows() || c.has_state())
    return Status::Error("cache files do not hold sliding-window or recurrent layers yet (this model has " +
                         std::string(c.layout().has_windows() ? "sliding-window" : "recurrent") + " layers)");
  if (c.layout().protected_layout())
    return Status::Error("cache files do not hold protected tokens' rows yet (--kv-protect)");
  return Status::Ok();
}
}  // namespace

Status save_cache_file(const std::string& path, const KvCache& cache, uint64_t model,
                       const std::vector<int32_t>& tokens, const CacheSaveOptions& opt) {
  if (Status s = kept_in_files(cache); !s.ok()) return s;
  const int n = cache.n_tokens(), H = cache.n_kv_heads(), d = cache.head_dim();
  if (tokens.size() != static_cast<size_t>(n))
    return Status::Error("cache file: " + std::to_string(tokens.size()) + " token ids for a cache of " +
                         std::to_string(n) + " tokens");
  const KvCacheOptions& o = cache.options();
  Put hd;
  hd.buf.append(kMagic, 8);
  hd.put<uint32_t>(kVersion);
  hd.put<uint32_t>(0);  // header length, patched below
  hd.put<uint64_t>(model);
  hd.put<uint64_t>(o.policy ? o.policy->fingerprint() : 0);
  hd.put<uint64_t>(o.seed);
  hd.put<uint32_t>(cache.n_layer());
  hd.put<uint32_t>(H);
  hd.put<uint32_t>(d);
  hd.put<uint32_t>(n);
  hd.put<uint32_t>(cache.mean_rows());
  std::vector<CacheLayerState> states(cache.n_layer());
  for (int l = 0; l < cache.n_layer(); ++l) {
    states[l] = cache.staging(l) ? CacheLayerState::kStaging
                : cache.mu_k(l)  ? CacheLayerState::kCentred
                                 : CacheLayerState::kPlain;
    hd.put<uint8_t>(static_cast<uint8_t>(states[l]));
    for (const std::string* name : {&cache.type_k(l), &cache.type_v(l)}) {
      if (name->empty() || name->size() > 255)
        return Status::Error("cache file: format name '" + *name + "' does not fit the header (1..255 bytes)");
      hd.put<uint8_t>(static_cast<uint8_t>(name->size()));
      hd.buf += *name;
    }
  }
  const uint32_t hlen = static_cast<uint32_t>(hd.buf.size() - 16);
  std::memcpy(hd.buf.data() + 12, &hlen, 4);
  hd.put<uint64_t>(XXH64(hd.buf.data(), hd.buf.size(), 0));

  auto w = AtomicWriter::open(path);
  if (!w) return w.status();
  w->fail_after(opt.fail_after_bytes);
  if (Status s = w->write(hd.buf.data(), hd.buf.size()); !s.ok()) return s;
  // A section: length, payload pieces (hashed as written), checksum.
  auto section = [&](uint64_t len, const std::vector<std::pair<const void*, size_t>>& parts) -> Status {
    HashState hs;
    if (Status s = w->write(&len, 8); !s.ok()) return s;
    uint64_t total = 0;
    for (const auto& [p, b] : parts) {
      XXH64_update(hs.s, p, b);
      if (Status s = w->write(p, b); !s.ok()) return s;
      total += b;
    }
    if (total != len) return Status::Error("cache file: internal size mismatch");
    const uint64_t sum = XXH64_digest(hs.s);
    return w->write(&sum, 8);
  };
  if (Status s = section(uint64_t(4) * n, {{tokens.data(), size_t(n) * 4}}); !s.ok()) return s;
  for (int l = 0; l < cache.n_layer(); ++l) {
    std::vector<std::pair<const void*, size_t>> parts;
    if (states[l] == CacheLayerState::kCentred) {
      parts.push_back({cache.mu_k(l), size_t(H) * d * 4});
      parts.push_back({cache.mu_v(l), size_t(H) * d * 4});
    }
    uint64_t len = 0;
    // Each head's rows in token order: runs of a block's rows when paged.
    for (const KvRows& r : {cache.k_rows(l), cache.v_rows(l)})
      for (int h = 0; h < H; ++h) {
        const size_t rb = r.codec->row_bytes(), hs = r.head_stride ? r.head_stride : rb;
        for (int t = 0; t < n;) {
          const int run = r.blocks ? std::min(n, ((t >> r.block_shift) + 1) << r.block_shift) - t : n - t;
          parts.push_back({r.row(t, h, rb, hs), size_t(run) * rb});
          t += run;
        }
      }
    for (const auto& p : parts) len += p.second;
    if (Status s = section(len, parts); !s.ok()) return s;
  }
  return w->commit();
}

// Restores rows in place: a friend of KvCache.
class CacheFileLoader {
 public:
  // Into a fresh cache made by `make` (its own pool, or a shared one).
  template <class Make>
  static Expected<LoadedCache> load(const ByteSource& src, int n_layer, int H, int d, const KvCacheOptions& co,
                                    uint64_t model, int n_vocab, const Make& make) {
    auto hp = read_cache_header(src);
    if (!hp) return hp.status();
    const CacheFileHeader& h = *hp;
    auto mismatch = [](const std::string& m) { return Status::Error("made for another setup: " + m); };
    if (model != 0 && h.model != model)
      return mismatch("another model (fingerprint " + std::to_string(h.model) + ", this model " + std::to_string(model) + ")");
    if (h.n_layer != n_layer || h.n_kv_heads != H || h.head_dim != d)
      return mismatch(std::to_string(h.n_layer) + " layers x " + std::to_string(h.n_kv_heads) + " KV heads x d " +
                      std::to_string(h.head_dim) + ", the model has " + std::to_string(n_layer) + " x " +
                      std::to_string(H) + " x " + std::to_string(d));
    if (h.n_tokens > co.capacity)
      return Status::Error("the file holds " + std::to_string(h.n_tokens) + " tokens, more than the context of " +
                           std::to_string(co.capacity) + " (raise -c)");
    if (src.size() != h.file_bytes)
      return Status::Error((src.size() < h.file_bytes ? "truncated: " : "trailing bytes: ") + std::string("the file has ") +
                           std::to_string(src.size()) + " bytes, the header describes " + std::to_string(h.file_bytes));
    auto made = make();
    if (!made) return made.status();
    KvCache& c = **made;
    if (Status s = kept_in_files(c); !s.ok()) return s;
    if (h.n_tokens > c.capacity())
      return Status::Error("the file holds " + std::to_string(h.n_tokens) + " tokens, more than the context of " +
                           std::to_string(c.capacity()) + " (raise -c)");
    const uint64_t pol = co.policy ? co.policy->fingerprint() : 0;
    if (h.policy != pol)
      return mismatch(h.policy ? (pol ? "another KV policy" : "a KV policy (pass the same --kv-policy)")
                               : "no KV policy (this run uses --kv-policy)");
    if (h.seed != co.seed) return mismatch("codec seed " + std::to_string(h.seed) + ", this run " + std::to_string(co.seed));
    for (int l = 0; l < n_layer; ++l)
      if (h.type_k[l] != c.type_k(l) || h.type_v[l] != c.type_v(l))
        return mismatch("layer " + std::to_string(l) + " K " + h.type_k[l] + " V " + h.type_v[l] + ", this run K " +
                        c.type_k(l) + " V " + c.type_v(l));
    if (h.mean_rows != c.mean_rows())
      return mismatch("mean centring over " + std::to_string(h.mean_rows) + " rows, this run " +
                      std::to_string(c.mean_rows()) + " (--kv-mean-center)");
    for (int l = 0; l < n_layer; ++l) {
      const CacheLayerState want = expected_state(c, l, h.n_tokens);
      if (h.state[l] != want)
        return Status::Error("layer " + std::to_string(l) + " is " + state_name(h.state[l]) + ", a cache of " +
                             std::to_string(h.n_tokens) + " tokens with these formats is " + state_name(want));
    }
    // Everything about the shape checked: take the blocks, read the sections.
    if (Status s = c.reserve(h.n_tokens); !s.ok()) return s;
    LoadedCache out;
    uint64_t off = h.header_bytes;
    {
      const std::string what = "token section";
      if (Status s = check_len(src, off, h.section_bytes[0], what); !s.ok()) return s;
      off += 8;
      out.tokens.resize(h.n_tokens);
      HashState hs;
      if (Status s = read_hashed(src, off, reinterpret_cast<uint8_t*>(out.tokens.data()), h.section_bytes[0], hs.s); !s.ok())
        return Status::Error(what + ": " + s.message());
      off += h.section_bytes[0];
      if (Status s = check_sum(src, off, XXH64_digest(hs.s), what); !s.ok()) return s;
      off += 8;
      for (int t = 0; t < h.n_tokens; ++t)
        if (out.tokens[t] < 0 || (n_vocab > 0 && out.tokens[t] >= n_vocab))
          return Status::Error("token " + std::to_string(t) + " has id " + std::to_string(out.tokens[t]) +
                               ", outside the vocabulary (" + std::to_string(n_vocab) + ")");
    }
    // Layers are independent sections, read and hashed on every core: the
    // copy out of the page cache, the page faults of the fresh cache and the
    // hash all scale (8K-token caches of the 1 GB model: 1.8x faster with 2
    // threads, RESULTS §9). Each layer's pages are mapped in one call first
    // (one fault per 4 KiB page cost more than the copy).
    std::vector<uint64_t> at(n_layer);
    for (int l = 0; l < n_layer; ++l) at[l] = l == 0 ? off : at[l - 1] + 16 + h.section_bytes[l];
    std::vector<Status> st(n_layer);
#pragma omp parallel for schedule(dynamic, 1)
    for (int l = 0; l < n_layer; ++l) {
      const std::string what = layer_what(l);
      Status s = check_len(src, at[l], h.section_bytes[l + 1], what);
      if (s.ok()) {
        prefault_rows(c, l, h.state[l], h.n_tokens);
        HashState hs;
        s = read_layer(src, at[l] + 8, c, l, h.state[l], h.n_tokens, hs.s);
        if (!s.ok()) s = Status::Error(what + ": " + s.message());
        if (s.ok()) s = check_sum(src, at[l] + 8 + h.section_bytes[l + 1], XXH64_digest(hs.s), what);
      }
      st[l] = std::move(s);
    }
    for (const Status& s : st)
      if (!s.ok()) return s;
    out.cache = std::move(*made);
    return out;
  }

 private:
  static CacheLayerState expected_state(const KvCache& c, int l, int n) {
    if (c.options().policy) return CacheLayerState::kCentred;
    const int m = c.layout().layer(l).mean_rows;
    if (m == 0 || n == 0) return CacheLayerState::kPlain;
    return n < m ? CacheLayerState::kStaging : CacheLayerState::kCentred;
  }

  static void prefault_rows(KvCache& c, int l, CacheLayerState st, int n) {
    if (st == CacheLayerState::kStaging) return;
    for (int k = 0; k < c.blocks_for(n); ++k) c.pool().prefault(l, c.block_table()[k]);
  }

  static Status read_layer(const ByteSource& src, uint64_t off, KvCache& c, int l, CacheLayerState st, int n,
                           XXH64_state_t* hs) {
    KvCache::Seq& S = c.seq_[l];
    const int H = c.n_kv_heads(), d = c.head_dim();
    if (st == CacheLayerState::kCentred) {
      for (std::vector<float>* mu : {&S.mu_k, &S.mu_v}) {
        if (Status s = read_hashed(src, off, reinterpret_cast<uint8_t*>(mu->data()), uint64_t(H) * d * 4, hs); !s.ok())
          return s;
        off += uint64_t(H) * d * 4;
        for (float x : *mu)
          if (!std::isfinite(x)) return Status::Error("a mean vector holds a non-finite value");
      }
      S.centred = true;
    }
    if (st == CacheLayerState::kStaging) {
      const int M = c.layout().layer(l).mean_rows;
      const size_t rb = c.layout().f16().row_bytes();
      S.sk.assign(size_t(H) * M * rb + 64, 0);
      S.sv.assign(size_t(H) * M * rb + 64, 0);
      for (std::vector<uint8_t>* rows : {&S.sk, &S.sv})
        for (int h = 0; h < H; ++h) {
          if (Status s = read_hashed(src, off, rows->data() + size_t(h) * M * rb, uint64_t(n) * rb, hs); !s.ok()) return s;
          off += uint64_t(n) * rb;
        }
      S.staging = true;
    } else {
      const int B = c.pool().block_tokens();
      for (int kv = 0; kv < 2; ++kv) {
        const size_t rb = kv ? c.layout().layer(l).v_row : c.layout().layer(l).k_row;
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < n;) {  // a block's run of this head's rows at a time
            const int run = std::min(n, (t / B + 1) * B) - t;
            uint8_t* dst = kv ? c.v_row(l, t, h) : c.k_row(l, t, h);
            if (Status s = read_hashed(src, off, dst, uint64_t(run) * rb, hs); !s.ok()) return s;
            off += uint64_t(run) * rb;
            t += run;
          }
      }
    }
    S.written = n;
    return Status::Ok();
  }
};

Expected<LoadedCache> load_cache_file(const ByteSource& src, const KvShape& shape, const KvCacheOptions& co,
                                      uint64_t model, int n_vocab) {
  return CacheFileLoader::load(src, shape.n_layer, shape.n_kv_heads, shape.head_dim, co, model, n_vocab,
                               [&] { return KvCache::create(shape, co); });
}

Expected<LoadedCache> load_cache_file_into(const ByteSource& src, const std::shared_ptr<BlockPool>& pool, int capacity,
                                           uint64_t model, int n_vocab) {
  const KvLayout& L = pool->layout();
  return CacheFileLoader::load(src, L.n_layer(), L.n_kv_heads(), L.head_dim(), L.options(), model, n_vocab,
                               [&] { return KvCache::create_in(pool, capacity); });
}

Expected<LoadedCache> load_cache_file(const std::string& path, const KvShape& shape, const KvCacheOptions& co,
                                      uint64_t model, int n_vocab) {
  auto src = open_file_source(path);
  if (!src) return src.status();
  auto r = load_cache_file(**src, shape, co, model, n_vocab);
  if (!r) return Status::Error("cache file " + path + ": " + r.error());
  return r;
}

}  // namespace tkv
