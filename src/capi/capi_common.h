// capi/: libturbokv.so, the C API of include/turbokv.h, beside tools/. It sees
// eval/ and below; never server/ or tools/.
//
// What every C API file shares (include/turbokv.h is the interface): the
// handle types behind the opaque pointers, the thread's error message, the
// guard that keeps C++ exceptions from crossing into C, and the checks of
// pointers, sizes and parameter structs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "codec/format.h"
#include "model/model.h"
#include "model/sampler.h"
#include "turbokv.h"

struct tkv_codec {
  std::unique_ptr<tkv::Codec> codec;
  std::string format;
  std::vector<float> mean;  // calibrated codecs: what quantize expects subtracted; else empty
};

struct tkv_cache {
  std::unique_ptr<tkv::KvCache> cache;
};

struct tkv_model {
  std::unique_ptr<tkv::Model> model;
};

struct tkv_context {
  const tkv::Model* model = nullptr;
  tkv::KvCacheOptions options;
  std::unique_ptr<tkv::KvCache> cache;
  std::vector<int32_t> tokens;  // what the cache holds, one id per position
  std::vector<float> logits;    // of the last evaluated token
  bool has_logits = false;
  int n_ctx = 0, threads = 1, batch = 512;
};

struct tkv_sampler {
  explicit tkv_sampler(const tkv::SamplerOptions& o) : sampler(o) {}
  tkv::Sampler sampler;
};

namespace tkv::capi {

// Sets the calling thread's message and returns s.
tkv_status fail(tkv_status s, std::string message);

// Runs f, turning any exception into a status and message (out of memory
// becomes TKV_ERR_MEMORY; anything else is a bug: TKV_ERR_INTERNAL).
template <typename F>
tkv_status guard(const char* fn, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(TKV_ERR_MEMORY, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(TKV_ERR_INTERNAL, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail(TKV_ERR_INTERNAL, std::string(fn) + ": unknown exception");
  }
}

// A null-pointer argument's error.
inline tkv_status null_arg(const char* fn, const char* what) {
  return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + what + " is NULL");
}

// a * b, or false when it overflows size_t.
inline bool mul_ok(size_t a, size_t b, size_t& out) { return !__builtin_mul_overflow(a, b, &out); }

// Copies a caller's parameter struct over `defaults`: the first struct_size
// bytes (an older, shorter struct keeps the newer fields' defaults). NULL
// means the defaults. A struct_size smaller than the size field itself or
// larger than this library's struct is an error: it was not filled from
// *_default_params().
template <typename T>
tkv_status read_params(const char* fn, const char* what, const T* p, T defaults, T& out) {
  out = defaults;
  if (!p) return TKV_OK;
  if (p->struct_size < sizeof(size_t) || p->struct_size > sizeof(T))
    return fail(TKV_ERR_ARGUMENT, std::string(fn) + ": " + what + "->struct_size is " + std::to_string(p->struct_size) +
                                      ", expected " + std::to_string(sizeof(T)) + " (fill it from " + what +
                                      " defaults: tkv_*_default_params())");
  std::memcpy(static_cast<void*>(&out), p, p->struct_size);
  out.struct_size = sizeof(T);
  return TKV_OK;
}

// TKV_ERR_IO when path cannot be opened for reading, else `otherwise`: tells
// a missing file from a damaged one after a reader failed.
tkv_status file_error(const std::string& path, tkv_status otherwise);

// The cache options of a context or cache: formats, centring, a preset or a
// policy (read, and checked to be `model`'s when one is given).
tkv_status cache_options(const char* fn, const char* type_k, const char* type_v, int32_t mean_center,
                         const char* preset, const char* policy_path, int n_layer, const tkv::Model* model,
                         tkv::KvCacheOptions& co);

// Threads: 0 or less means every core.
int resolve_threads(int32_t threads);

}  // namespace tkv::capi
