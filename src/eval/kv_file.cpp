#include "eval/kv_file.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace tkv {
namespace {

uint32_t load_le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void store_le32(uint32_t v, unsigned char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The file stores float32 little-endian; swap in place on a big-endian host.
void floats_from_le(std::vector<float>& v) {
  if constexpr (std::endian::native == std::endian::big) {
    for (auto& f : v) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      unsigned char b[4];
      std::memcpy(b, &u, 4);
      u = load_le32(b);
      std::memcpy(&f, &u, 4);
    }
  }
}

Status check_dim(const std::string& path, const char* field, uint32_t v, uint32_t max) {
  if (v == 0 || v > max)
    return Status::Error(path + ": header field " + field + " is " + std::to_string(v) +
                         " (expected 1.." + std::to_string(max) + ")");
  return Status::Ok();
}

// The header checks shared by the file and memory readers: magic, every
// dimension, and that `size` is exactly header + values. Sizes nothing.
Expected<KvFile> parse_kv_header(const std::string& path, const unsigned char* h, uint64_t size) {
  if (size < kKvFileHeaderBytes)
    return Status::Error(path + ": truncated header: file has " + std::to_string(size) +
                         " bytes, expected at least " + std::to_string(kKvFileHeaderBytes));
  const uint32_t magic = load_le32(h);
  if (magic != kKvFileMagic) {
    char buf[96];
    std::snprintf(buf, sizeof buf, ": bad magic 0x%08X (expected 0x%08X, a turbokv KV file)", magic,
                  kKvFileMagic);
    return Status::Error(path + buf);
  }
  KvFile kv;
  kv.layer = load_le32(h + 4);
  kv.kv_heads = load_le32(h + 8);
  kv.tokens = load_le32(h + 12);
  kv.head_dim = load_le32(h + 16);
  for (Status s : {check_dim(path, "kv_heads", kv.kv_heads, kKvFileMaxHeads),
                   check_dim(path, "tokens", kv.tokens, UINT32_MAX),
                   check_dim(path, "head_dim", kv.head_dim, kKvFileMaxHeadDim)})
    if (!s.ok()) return s;

  // 2^16 * 2^32 * 2^16 * 4 would overflow 64 bits; compare in long double first.
  const long double want_ld = static_cast<long double>(kv.kv_heads) * kv.tokens * kv.head_dim * 4.0L +
                              kKvFileHeaderBytes;
  const std::string dims = "kv_heads " + std::to_string(kv.kv_heads) + " x tokens " +
                           std::to_string(kv.tokens) + " x head_dim " + std::to_string(kv.head_dim);
  if (want_ld > static_cast<long double>(size)) {
    char implied[64];  // may exceed 64 bits: print the exact long double
    std::snprintf(implied, sizeof implied, "%.0Lf", want_ld);
    return Status::Error(path + ": truncated: file has " + std::to_string(size) + " bytes, header (" + dims +
                         " float32) implies " + implied);
  }
  const uint64_t want = static_cast<uint64_t>(want_ld);
  if (want != size)
    return Status::Error(path + ": file has " + std::to_string(size) + " bytes, header (" + dims +
                         " float32) implies exactly " + std::to_string(want) + " (trailing data)");
  return kv;
}

}  // namespace

Expected<KvFile> read_kv_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::Error(path + ": cannot open KV file (" + std::strerror(errno) + ")");
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::Error(path + ": cannot determine the file size");
  in.seekg(0);
  unsigned char h[kKvFileHeaderBytes] = {};
  if (static_cast<uint64_t>(size) >= kKvFileHeaderBytes && !in.read(reinterpret_cast<char*>(h), sizeof h))
    return Status::Error(path + ": read error in the header");
  auto kv = parse_kv_header(path, h, static_cast<uint64_t>(size));
  if (!kv) return kv;
  kv->data.resize(kv->values());
  if (!in.read(reinterpret_cast<char*>(kv->data.data()), static_cast<std::streamsize>(kv->values() * 4)))
    return Status::Error(path + ": read error in the data (file shrank while reading?)");
  floats_from_le(kv->data);
  return kv;
}

Expected<KvFile> parse_kv_file(const std::string& name, const uint8_t* data, size_t size) {
  unsigned char h[kKvFileHeaderBytes] = {};
  if (size >= kKvFileHeaderBytes) std::memcpy(h, data, kKvFileHeaderBytes);
  auto kv = parse_kv_header(name, h, size);
  if (!kv) return kv;
  kv->data.resize(kv->values());
  std::memcpy(kv->data.data(), data + kKvFileHeaderBytes, kv->values() * 4);
  floats_from_le(kv->data);
  return kv;
}

Status write_kv_file(const std::string& path, const KvFile& kv) {
  if (kv.data.size() != kv.values())
    return Status::Error(path + ": KV data has " + std::to_string(kv.data.size()) + " values, header implies " +
                         std::to_string(kv.values()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Error(path + ": cannot create KV file (" + std::strerror(errno) + ")");
  unsigned char h[kKvFileHeaderBytes];
  store_le32(kKvFileMagic, h);
  store_le32(kv.layer, h + 4);
  store_le32(kv.kv_heads, h + 8);
  store_le32(kv.tokens, h + 12);
  store_le32(kv.head_dim, h + 16);
  out.write(reinterpret_cast<const char*>(h), sizeof h);
  if constexpr (std::endian::native == std::endian::big) {
    for (float f : kv.data) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      unsigned char b[4];
      store_le32(u, b);
      out.write(reinterpret_cast<const char*>(b), 4);
    }
  } else {
    out.write(reinterpret_cast<const char*>(kv.data.data()), static_cast<std::streamsize>(kv.data.size() * 4));
  }
  out.flush();
  if (!out) return Status::Error(path + ": write failed (" + std::strerror(errno) + ")");
  return Status::Ok();
}

}  // namespace tkv
