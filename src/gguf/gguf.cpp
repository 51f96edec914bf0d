#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace tkv::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxAlignment = 1u << 20;
constexpr int kMaxNesting = 2;

const TensorType kTypes[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},   {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},   {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},  {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210}, {15, "Q8_K", 256, 292}, {24, "I8", 1, 1},      {25, "I16", 1, 2},
    {26, "I32", 1, 4},      {27, "I64", 1, 8},      {28, "F64", 1, 8},     {30, "BF16", 1, 2},
    {39, "MXFP4", 32, 17},
};

size_t scalar_size(Type t) {
  switch (t) {
    case Type::kU8: case Type::kI8: case Type::kBool: return 1;
    case Type::kU16: case Type::kI16: return 2;
    case Type::kU32: case Type::kI32: case Type::kF32: return 4;
    case Type::kU64: case Type::kI64: case Type::kF64: return 8;
    default: return 0;
  }
}

// Bounds-checked little-endian reader over the mapped file.
struct Cursor {
  const uint8_t* base;
  size_t size;
  size_t pos = 0;
  const std::string& path;

  Status fail(const std::string& what, size_t at) const {
    std::ostringstream os;
    os << path << ": " << what << " (at byte " << at << " of " << size << ")";
    return Status::Error(os.str());
  }
  Status need(size_t n, const std::string& field) const {
    if (n > size - pos) {
      std::ostringstream os;
      os << "truncated: " << field << " needs " << n << " bytes, " << (size - pos) << " left";
      return fail(os.str(), pos);
    }
    return Status::Ok();
  }
  template <class T>
  Status read(T& v, const std::string& field) {
    Status s = need(sizeof(T), field);
    if (!s.ok()) return s;
    std::memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return Status::Ok();
  }
  Status read_string(std::string_view& out, const std::string& field) {
    uint64_t len = 0;
    const size_t at = pos;
    Status s = read(len, field + " length");
    if (!s.ok()) return s;
    if (len > size - pos) {
      std::ostringstream os;
      os << field << " length " << len << " runs past the end of the file";
      return fail(os.str(), at);
    }
    out = std::string_view(reinterpret_cast<const char*>(base + pos), len);
    pos += len;
    return Status::Ok();
  }
};

Status read_value(Cursor& c, Type t, Value& v, const std::string& field, int depth) {
  v.type = t;
  const size_t at = c.pos;
  switch (t) {
    case Type::kU8: { uint8_t x = 0; auto s = c.read(x, field); v.u = x; return s; }
    case Type::kI8: { int8_t x = 0; auto s = c.read(x, field); v.i = x; return s; }
    case Type::kU16: { uint16_t x = 0; auto s = c.read(x, field); v.u = x; return s; }
    case Type::kI16: { int16_t x = 0; auto s = c.read(x, field); v.i = x; return s; }
    case Type::kU32: { uint32_t x = 0; auto s = c.read(x, field); v.u = x; return s; }
    case Type::kI32: { int32_t x = 0; auto s = c.read(x, field); v.i = x; return s; }
    case Type::kU64: { uint64_t x = 0; auto s = c.read(x, field); v.u = x; return s; }
    case Type::kI64: { int64_t x = 0; auto s = c.read(x, field); v.i = x; return s; }
    case Type::kF32: { float x = 0; auto s = c.read(x, field); v.f = x; return s; }
    case Type::kF64: { double x = 0; auto s = c.read(x, field); v.f = x; return s; }
    case Type::kBool: {
      uint8_t x = 0;
      auto s = c.read(x, field);
      if (!s.ok()) return s;
      if (x > 1) return c.fail(field + ": bool value " + std::to_string(x) + " is not 0 or 1", at);
      v.u = x;
      return s;
    }
    case Type::kString: return c.read_string(v.s, field);
    case Type::kArray: {
      if (depth >= kMaxNesting) return c.fail(field + ": arrays nested too deeply", at);
      uint32_t et = 0;
      Status s = c.read(et, field + " element type");
      if (!s.ok()) return s;
      if (et > static_cast<uint32_t>(Type::kF64))
        return c.fail(field + ": unknown array element type " + std::to_string(et), at);
      v.elem = static_cast<Type>(et);
      s = c.read(v.count, field + " count");
      if (!s.ok()) return s;
      const size_t es = scalar_size(v.elem);
      if (es > 0) {
        if (v.count > (c.size - c.pos) / es)
          return c.fail(field + ": array of " + std::to_string(v.count) + " " + type_name(v.elem) +
                            " runs past the end of the file", at);
        v.raw = c.base + c.pos;
        c.pos += v.count * es;
        if (v.elem == Type::kBool)
          for (uint64_t k = 0; k < v.count; ++k)
            if (v.raw[k] > 1) return c.fail(field + ": bool element is not 0 or 1", at);
        return Status::Ok();
      }
      // Strings (8+ bytes each) or nested arrays (12+ bytes each): bound the count first.
      if (v.count > (c.size - c.pos) / 8)
        return c.fail(field + ": array count " + std::to_string(v.count) + " is larger than the file allows", at);
      if (v.elem == Type::kString) {
        v.strings.resize(v.count);
        for (uint64_t k = 0; k < v.count; ++k) {
          s = c.read_string(v.strings[k], field + "[" + std::to_string(k) + "]");
          if (!s.ok()) return s;
        }
      } else {
        v.items.resize(v.count);
        for (uint64_t k = 0; k < v.count; ++k) {
          s = read_value(c, Type::kArray, v.items[k], field + "[" + std::to_string(k) + "]", depth + 1);
          if (!s.ok()) return s;
        }
      }
      return Status::Ok();
    }
  }
  return c.fail(field + ": unknown value type " + std::to_string(static_cast<uint32_t>(t)), at);
}

}  // namespace

const char* type_name(Type t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                "string", "array", "u64", "i64", "f64"};
  const auto k = static_cast<uint32_t>(t);
  return k < 13 ? names[k] : "?";
}

bool Value::is_int() const {
  switch (type) {
    case Type::kU8: case Type::kI8: case Type::kU16: case Type::kI16: case Type::kU32:
    case Type::kI32: case Type::kU64: case Type::kI64: return true;
    default: return false;
  }
}

double Value::num(uint64_t k) const {
  const uint8_t* p = raw + k * scalar_size(elem);
  switch (elem) {
    case Type::kF32: { float x; std::memcpy(&x, p, 4); return x; }
    case Type::kF64: { double x; std::memcpy(&x, p, 8); return x; }
    default: return static_cast<double>(inum(k));
  }
}

int64_t Value::inum(uint64_t k) const {
  const uint8_t* p = raw + k * scalar_size(elem);
  switch (elem) {
    case Type::kU8: case Type::kBool: return *p;
    case Type::kI8: return static_cast<int8_t>(*p);
    case Type::kU16: { uint16_t x; std::memcpy(&x, p, 2); return x; }
    case Type::kI16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case Type::kU32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case Type::kI32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case Type::kU64: { uint64_t x; std::memcpy(&x, p, 8); return static_cast<int64_t>(x); }
    case Type::kI64: { int64_t x; std::memcpy(&x, p, 8); return x; }
    case Type::kF32: case Type::kF64: return static_cast<int64_t>(num(k));
    default: return 0;
  }
}

const TensorType* tensor_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}
const TensorType* tensor_type(std::string_view name) {
  for (const auto& t : kTypes)
    if (name == t.name) return &t;
  return nullptr;
}

Expected<std::shared_ptr<File>> File::open(const std::string& path) {
  auto f = open_part(path);
  if (!f) return f;
  if (Status s = (*f)->join_parts(); !s.ok()) return s;
  return f;
}

namespace {

// llama.cpp's split names: PREFIX-%05d-of-%05d.gguf, parts counted from 1.
std::string split_path(const std::string& prefix, uint64_t no, uint64_t count) {
  char tail[64];
  std::snprintf(tail, sizeof(tail), "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(no),
                static_cast<unsigned long long>(count));
  return prefix + tail;
}

// A split key of a part: an unsigned integer, or an error naming it.
Expected<uint64_t> split_key(const File& f, const char* key) {
  const Value* v = f.find(key);
  if (!v) return Status::Error(f.path() + ": " + key + " is missing (a part of a split model has it)");
  if (!v->is_int() || v->type == Type::kBool) return Status::Error(f.path() + ": " + key + " is not an integer");
  const bool is_signed = v->type == Type::kI8 || v->type == Type::kI16 || v->type == Type::kI32 || v->type == Type::kI64;
  if (is_signed && v->i < 0) return Status::Error(f.path() + ": " + key + " = " + std::to_string(v->i) + " is negative");
  return is_signed ? static_cast<uint64_t>(v->i) : v->u;
}

}  // namespace

// A split model's later parts, opened by name from the first one's and
// checked against it: each its own number, the same count, and all
// together the tensor count the first part announces, no name twice.
Status File::join_parts() {
  const Value* cv = find("split.count");
  if (!cv) return Status::Ok();
  auto count = split_key(*this, "split.count");
  if (!count) return count.status();
  auto no = split_key(*this, "split.no");
  if (!no) return no.status();
  if (*count == 0 || *count > 99999) return Status::Error(path_ + ": split.count = " + std::to_string(*count) + " is out of range (1..99999)");
  if (*no >= *count)
    return Status::Error(path_ + ": split.no = " + std::to_string(*no) + " is not below split.count " + std::to_string(*count));
  if (*no != 0)
    return Status::Error(path_ + " is part " + std::to_string(*no + 1) + " of " + std::to_string(*count) +
                         " of a split model; open its first part (split.no 0)");
  auto total = split_key(*this, "split.tensors.count");
  if (!total) return total.status();
  parts_.push_back(Part{path_, tensors_.size(), size_});
  if (*count == 1) return Status::Ok();
  const std::string tail = split_path("", 1, *count);
  if (path_.size() <= tail.size() || path_.compare(path_.size() - tail.size(), tail.size(), tail) != 0)
    return Status::Error(path_ + ": the first of " + std::to_string(*count) + " parts must be named PREFIX" + tail +
                         " (llama-gguf-split's names), so that the others can be found");
  const std::string prefix = path_.substr(0, path_.size() - tail.size());
  for (uint64_t k = 1; k < *count; ++k) {
    const std::string part = split_path(prefix, k + 1, *count);
    const std::string which = "part " + std::to_string(k + 1) + " of " + std::to_string(*count) + " (" + part + ")";
    auto f = open_part(part);
    if (!f) return Status::Error("split model " + path_ + ": " + which + ": " + f.error());
    auto pno = split_key(**f, "split.no");
    if (!pno) return Status::Error("split model " + path_ + ": " + which + ": " + pno.error());
    auto pcount = split_key(**f, "split.count");
    if (!pcount) return Status::Error("split model " + path_ + ": " + which + ": " + pcount.error());
    if (*pcount != *count || *pno != k)
      return Status::Error("split model " + path_ + ": " + which + " says it is part " + std::to_string(*pno + 1) +
                           " of " + std::to_string(*pcount) + " (split.no " + std::to_string(*pno) + ", split.count " +
                           std::to_string(*pcount) + "): a part renamed, reordered or from another split");
    auto pt = split_key(**f, "split.tensors.count");
    if (!pt) return Status::Error("split model " + path_ + ": " + which + ": " + pt.error());
    if (*pt != *total)
      return Status::Error("split model " + path_ + ": " + which + " has split.tensors.count " + std::to_string(*pt) +
                           ", the first part " + std::to_string(*total) + ": a part of another split");
    for (const Tensor& t : (*f)->tensors()) {
      if (tensor_index_.count(t.name))
        return Status::Error("split model " + path_ + ": " + which + " holds tensor '" + t.name +
                             "' that an earlier part holds too");
      tensor_index_[t.name] = tensors_.size();
      tensors_.push_back(t);
    }
    parts_.push_back(Part{part, (*f)->tensors().size(), (*f)->size()});
    more_.push_back(std::move(*f));
  }
  if (tensors_.size() != *total)
    return Status::Error("split model " + path_ + ": the " + std::to_string(*count) + " parts hold " +
                         std::to_string(tensors_.size()) + " tensors, split.tensors.count says " + std::to_string(*total));
  return Status::Ok();
}

Expected<std::shared_ptr<File>> File::open_part(const std::string& path) {
  std::shared_ptr<File> f(new File());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file");
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::Error(path + ": cannot map: " + std::strerror(errno));
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);
  Status s = f->parse();
  if (!s.ok()) return s;
  return f;
}

Expected<std::shared_ptr<File>> File::from_memory(const std::string& name, const uint8_t* data, size_t size) {
  std::shared_ptr<File> f(new File());
  f->path_ = name;
  f->owned_.assign(data, data + size);
  f->base_ = f->owned_.data();
  f->size_ = size;
  Status s = f->parse();
  if (!s.ok()) return s;
  return f;
}

File::~File() {
  if (mapped_) munmap(const_cast<uint8_t*>(base_), size_);
}

Status File::parse() {
  Cursor c{base_, size_, 0, path_};
  uint32_t magic = 0;
  Status s = c.read(magic, "magic");
  if (!s.ok()) return s;
  if (magic != kMagic) return c.fail("not a GGUF file (magic is not \"GGUF\")", 0);
  s = c.read(version_, "version");
  if (!s.ok()) return s;
  if (version_ != 2 && version_ != 3)
    return c.fail("GGUF version " + std::to_string(version_) + " is not supported (2 or 3)", 4);
  uint64_t n_tensors = 0, n_kv = 0;
  if (!(s = c.read(n_tensors, "tensor count")).ok()) return s;
  if (!(s = c.read(n_kv, "metadata count")).ok()) return s;
  // Each entry takes at least 12 (metadata) or 24 (tensor info) bytes.
  if (n_kv > (size_ - c.pos) / 12)
    return c.fail("metadata count " + std::to_string(n_kv) + " is larger than the file allows", 16);
  if (n_tensors > (size_ - c.pos) / 24)
    return c.fail("tensor count " + std::to_string(n_tensors) + " is larger than the file allows", 8);
  kv_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key;
    const size_t at = c.pos;
    if (!(s = c.read_string(key, "metadata key #" + std::to_string(k))).ok()) return s;
    std::string skey(key);
    if (kv_index_.count(skey)) return c.fail("duplicate metadata key '" + skey + "'", at);
    uint32_t t = 0;
    if (!(s = c.read(t, "type of '" + skey + "'")).ok()) return s;
    if (t > static_cast<uint32_t>(Type::kF64))
      return c.fail("metadata '" + skey + "' has unknown type " + std::to_string(t), c.pos - 4);
    Value v;
    if (!(s = read_value(c, static_cast<Type>(t), v, "metadata '" + skey + "'", 0)).ok()) return s;
    kv_index_[skey] = kv_.size();
    kv_.emplace_back(std::move(skey), std::move(v));
  }
  if (const Value* a = find("general.alignment")) {
    if (!a->is_int() || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > kMaxAlignment)
      return Status::Error(path_ + ": general.alignment must be a power of two up to 1 MiB");
    alignment_ = a->u;
  }
  tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Tensor t;
    std::string_view name;
    const size_t at = c.pos;
    if (!(s = c.read_string(name, "tensor #" + std::to_string(k) + " name")).ok()) return s;
    t.name = std::string(name);
    const std::string what = "tensor '" + t.name + "'";
    if (tensor_index_.count(t.name)) return c.fail("duplicate " + what, at);
    uint32_t nd = 0;
    if (!(s = c.read(nd, what + " dimension count")).ok()) return s;
    if (nd == 0 || nd > kMaxDims)
      return c.fail(what + " has " + std::to_string(nd) + " dimensions (1 to 4 expected)", c.pos - 4);
    t.dims.resize(nd);
    t.n_elements = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      if (!(s = c.read(t.dims[d], what + " dimension " + std::to_string(d))).ok()) return s;
      if (t.dims[d] == 0 || t.dims[d] > (uint64_t(1) << 40) ||
          t.n_elements > std::numeric_limits<uint64_t>::max() / t.dims[d] / 4)
        return c.fail(what + " dimension " + std::to_string(d) + " = " + std::to_string(t.dims[d]) +
                          " is out of range", c.pos - 8);
      t.n_elements *= t.dims[d];
    }
    if (!(s = c.read(t.type, what + " type")).ok()) return s;
    const TensorType* tt = tensor_type(t.type);
    if (!tt) return c.fail(what + " has tensor type id " + std::to_string(t.type) + ", which turbokv does not support", c.pos - 4);
    if (t.dims[0] % tt->block != 0)
      return c.fail(what + ": first dimension " + std::to_string(t.dims[0]) + " is not a multiple of the " +
                        tt->name + " block size " + std::to_string(tt->block), at);
    t.n_bytes = t.n_elements / tt->block * tt->block_bytes;
    if (!(s = c.read(t.offset, what + " offset")).ok()) return s;
    if (t.offset % alignment_ != 0)
      return c.fail(what + " offset " + std::to_string(t.offset) + " is not aligned to " + std::to_string(alignment_),
                    c.pos - 8);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  data_offset_ = (c.pos + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_) return c.fail("data section starts past the end of the file", c.pos);
  const uint64_t data_size = size_ > data_offset_ ? size_ - data_offset_ : 0;
  for (auto& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      std::ostringstream os;
      os << path_ << ": tensor '" << t.name << "' (" << t.n_bytes << " bytes at data offset " << t.offset
         << ") runs past the end of the file (data section is " << data_size << " bytes from byte " << data_offset_ << ")";
      return Status::Error(os.str());
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  return Status::Ok();
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const Tensor* File::tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Status::Error(path_ + ": missing metadata '" + std::string(key) + "'");
  if (v->type != Type::kString)
    return Status::Error(path_ + ": metadata '" + std::string(key) + "' is " + type_name(v->type) + ", expected string");
  return std::string(v->s);
}

Expected<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Status::Error(path_ + ": missing metadata '" + std::string(key) + "'");
  if (!v->is_int()) return Status::Error(path_ + ": metadata '" + std::string(key) + "' is " + type_name(v->type) + ", expected an integer");
  if (v->type == Type::kI8 || v->type == Type::kI16 || v->type == Type::kI32 || v->type == Type::kI64) {
    if (v->i < 0) return Status::Error(path_ + ": metadata '" + std::string(key) + "' is negative");
    return static_cast<uint64_t>(v->i);
  }
  return v->u;
}

Expected<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return Status::Error(path_ + ": missing metadata '" + std::string(key) + "'");
  if (v->is_float()) return v->f;
  if (v->is_int()) {
    const bool is_signed = v->type == Type::kI8 || v->type == Type::kI16 || v->type == Type::kI32 || v->type == Type::kI64;
    return is_signed ? static_cast<double>(v->i) : static_cast<double>(v->u);
  }
  return Status::Error(path_ + ": metadata '" + std::string(key) + "' is " + type_name(v->type) + ", expected a number");
}

uint64_t File::get_uint_or(std::string_view key, uint64_t fallback) const {
  auto r = get_uint(key);
  return r ? *r : fallback;
}
double File::get_float_or(std::string_view key, double fallback) const {
  auto r = get_float(key);
  return r ? *r : fallback;
}
std::string File::get_string_or(std::string_view key, std::string fallback) const {
  auto r = get_string(key);
  return r ? *r : fallback;
}

// ---------------------------------------------------------------- writer

namespace {
template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
}  // namespace

void Writer::key(const std::string& k, Type t) {
  put_str(kv_, k);
  put<uint32_t>(kv_, static_cast<uint32_t>(t));
  ++n_kv_;
}
void Writer::add_string(const std::string& k, const std::string& v) { key(k, Type::kString); put_str(kv_, v); }
void Writer::add_u32(const std::string& k, uint32_t v) { key(k, Type::kU32); put(kv_, v); }
void Writer::add_i32(const std::string& k, int32_t v) { key(k, Type::kI32); put(kv_, v); }
void Writer::add_u64(const std::string& k, uint64_t v) { key(k, Type::kU64); put(kv_, v); }
void Writer::add_f32(const std::string& k, float v) { key(k, Type::kF32); put(kv_, v); }
void Writer::add_bool(const std::string& k, bool v) { key(k, Type::kBool); put<uint8_t>(kv_, v ? 1 : 0); }
void Writer::add_string_array(const std::string& k, const std::vector<std::string>& v) {
  key(k, Type::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(Type::kString));
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_str(kv_, s);
}
void Writer::add_f32_array(const std::string& k, const std::vector<float>& v) {
  key(k, Type::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(Type::kF32));
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}
void Writer::add_i32_array(const std::string& k, const std::vector<int32_t>& v) {
  key(k, Type::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(Type::kI32));
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

namespace {
// Scalar v as its little-endian bytes.
void put_scalar(std::vector<uint8_t>& b, const Value& v) {
  switch (v.type) {
    case Type::kU8: case Type::kBool: put<uint8_t>(b, static_cast<uint8_t>(v.u)); break;
    case Type::kI8: put<int8_t>(b, static_cast<int8_t>(v.i)); break;
    case Type::kU16: put<uint16_t>(b, static_cast<uint16_t>(v.u)); break;
    case Type::kI16: put<int16_t>(b, static_cast<int16_t>(v.i)); break;
    case Type::kU32: put<uint32_t>(b, static_cast<uint32_t>(v.u)); break;
    case Type::kI32: put<int32_t>(b, static_cast<int32_t>(v.i)); break;
    case Type::kF32: put<float>(b, static_cast<float>(v.f)); break;
    case Type::kU64: put<uint64_t>(b, v.u); break;
    case Type::kI64: put<int64_t>(b, v.i); break;
    case Type::kF64: put<double>(b, v.f); break;
    default: break;
  }
}
}  // namespace

Status Writer::add_value(const std::string& k, const Value& v) {
  if (v.type == Type::kString) {
    add_string(k, std::string(v.s));
    return Status::Ok();
  }
  if (v.type != Type::kArray) {
    if (scalar_size(v.type) == 0) return Status::Error("gguf writer: '" + k + "' has an unknown type");
    key(k, v.type);
    put_scalar(kv_, v);
    return Status::Ok();
  }
  if (v.elem == Type::kArray) return Status::Error("gguf writer: '" + k + "' is a nested array (not written)");
  key(k, Type::kArray);
  put<uint32_t>(kv_, static_cast<uint32_t>(v.elem));
  put<uint64_t>(kv_, v.count);
  if (v.elem == Type::kString) {
    for (auto s : v.strings) put_str(kv_, std::string(s));
  } else {
    const size_t n = scalar_size(v.elem) * v.count;
    if (n && v.raw) kv_.insert(kv_.end(), v.raw, v.raw + n);
  }
  return Status::Ok();
}

Status Writer::add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                          const void* bytes, size_t n_bytes) {
  const TensorType* tt = tensor_type(type);
  if (!tt) return Status::Error("gguf writer: unknown tensor type " + std::to_string(type));
  if (dims.empty() || dims.size() > kMaxDims) return Status::Error("gguf writer: " + name + ": 1 to 4 dims");
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  if (dims[0] % tt->block != 0 || n / tt->block * tt->block_bytes != n_bytes)
    return Status::Error("gguf writer: " + name + ": byte size does not match dims and type " + tt->name);
  T t{name, dims, type, std::vector<uint8_t>(static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n_bytes)};
  tensors_.push_back(std::move(t));
  return Status::Ok();
}

std::vector<uint8_t> Writer::bytes() const {
  std::vector<uint8_t> b;
  put<uint32_t>(b, kMagic);
  put<uint32_t>(b, 3);
  put<uint64_t>(b, tensors_.size());
  put<uint64_t>(b, n_kv_);
  b.insert(b.end(), kv_.begin(), kv_.end());
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.dims.size()));
    for (auto d : t.dims) put<uint64_t>(b, d);
    put<uint32_t>(b, t.type);
    put<uint64_t>(b, off);
    off += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  b.resize((b.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  for (const auto& t : tensors_) {
    b.insert(b.end(), t.data.begin(), t.data.end());
    b.resize((b.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  return b;
}

Status Writer::write(const std::string& path) const {
  const auto b = bytes();
  std::ofstream f(path, std::ios::binary);
  if (!f) return Status::Error(path + ": cannot create");
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) return Status::Error(path + ": write failed");
  return Status::Ok();
}

}  // namespace tkv::gguf
