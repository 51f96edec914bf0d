// gguf/: the GGUF file format — the reader and writer, ggml's weight types and
// their block layouts, and the weight quantizers. It sees util/ only.
//
// GGUF files (v2 and v3), memory-mapped and validated: every count, length,
// offset and type id is checked against the file before it is used, and
// errors name the file, the field and the byte offset. Also a writer, for
// tests and `turbokv gen-model`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tkv::gguf {

enum class Type : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
const char* type_name(Type t);

// One metadata value. Arrays keep a view into the mapped file (no copies of
// 150k-token vocabularies); strings are views too.
struct Value {
  Type type = Type::kU8;
  uint64_t u = 0;       // unsigned integers and bool
  int64_t i = 0;        // signed integers
  double f = 0;         // floats
  std::string_view s;   // kString
  // kArray:
  Type elem = Type::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;             // numeric elements, packed little-endian
  std::vector<std::string_view> strings;    // string elements
  std::vector<Value> items;                 // nested arrays (rare)

  bool is_int() const;
  bool is_float() const { return type == Type::kF32 || type == Type::kF64; }
  // Numeric element k of a numeric array as double / int64.
  double num(uint64_t k) const;
  int64_t inum(uint64_t k) const;
};

// ggml tensor types with their block layout.
struct TensorType {
  uint32_t id;
  const char* name;
  uint32_t block;       // values per block
  uint32_t block_bytes; // bytes per block
};
const TensorType* tensor_type(uint32_t id);  // null if unknown
const TensorType* tensor_type(std::string_view name);

struct Tensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the contiguous one
  uint32_t type = 0;
  uint64_t offset = 0;         // from the start of the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;
  const TensorType& info() const { return *tensor_type(type); }
};

// One part of a split model (llama.cpp's gguf-split layout).
struct Part {
  std::string path;
  uint64_t n_tensors = 0, size = 0;
};

class File {
 public:
  // Opens a GGUF file. The first part of a split model
  // (NAME-00001-of-0000N.gguf with split.no 0, split.count N > 1, written
  // by llama-gguf-split) opens every part by that name, each mapped, and
  // holds their tensors as one file's (its metadata is the first part's);
  // a missing, misnumbered or mismatched part is an error naming it, and so
  // is a later part opened on its own.
  static Expected<std::shared_ptr<File>> open(const std::string& path);
  // One file as it is, split keys or not (tools that look at a single part).
  static Expected<std::shared_ptr<File>> open_part(const std::string& path);
  // Parses a GGUF held in memory (a copy is kept); `name` stands for the path
  // in error messages. The fuzz harness and tests read files this way.
  static Expected<std::shared_ptr<File>> from_memory(const std::string& name, const uint8_t* data, size_t size);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  size_t size() const { return size_; }
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  // The parts of a split model, the first (this file) included; empty for
  // a file that is not split.
  const std::vector<Part>& parts() const { return parts_; }

  const Value* find(std::string_view key) const;
  const Tensor* tensor(std::string_view name) const;
  // Typed lookups: errors name the key and what was found instead.
  Expected<std::string> get_string(std::string_view key) const;
  Expected<uint64_t> get_uint(std::string_view key) const;
  Expected<double> get_float(std::string_view key) const;
  uint64_t get_uint_or(std::string_view key, uint64_t fallback) const;
  double get_float_or(std::string_view key, double fallback) const;
  std::string get_string_or(std::string_view key, std::string fallback) const;

 private:
  File() = default;
  Status parse();
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;  // from_memory's copy
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<Part> parts_;
  std::vector<std::shared_ptr<File>> more_;  // the later parts, kept mapped
  Status join_parts();
};

// Builds a GGUF v3 file in memory and writes it.
class Writer {
 public:
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_f32_array(const std::string& key, const std::vector<float>& v);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // A value as read from a File, of any type (copying or splitting a file's
  // metadata); nested arrays are an error naming the key.
  Status add_value(const std::string& key, const Value& v);
  // Copies `bytes` (which must be the tensor's exact size for its type).
  Status add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                    const void* bytes, size_t n_bytes);
  // The whole file image.
  std::vector<uint8_t> bytes() const;
  Status write(const std::string& path) const;

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  void key(const std::string& k, Type t);
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  std::vector<T> tensors_;
  uint64_t alignment_ = 32;
};

}  // namespace tkv::gguf
