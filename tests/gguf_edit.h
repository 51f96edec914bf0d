// Copies a GGUF file's metadata and tensors into a Writer, keeping what the
// predicates keep, so that a test can make a variant of a file (a key
// changed, a tensor added or dropped, a file cut into parts).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "gguf/gguf.h"

namespace tkv {

inline void copy_gguf(const gguf::File& f, gguf::Writer& w,
                      const std::function<bool(const std::string&)>& keep_key = {},
                      const std::function<bool(const gguf::Tensor&)>& keep_tensor = {}) {
  for (const auto& [k, v] : f.metadata()) {
    if (!keep_key || keep_key(k)) {
      ASSERT_TRUE(w.add_value(k, v).ok()) << k;
    }
  }
  for (const auto& t : f.tensors()) {
    if (!keep_tensor || keep_tensor(t)) {
      ASSERT_TRUE(w.add_tensor(t.name, t.dims, t.type, t.data, t.n_bytes).ok()) << t.name;
    }
  }
}

}  // namespace tkv
