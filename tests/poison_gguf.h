// Writes NaN into one float of an F32 tensor of a GGUF file on disk (the
// hardening and C API tests' broken models).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "model/gguf.h"

namespace tkv {

inline void poison_gguf(const std::string& path, const std::string& tensor, uint64_t index = 0) {
  uint64_t at = 0;
  {
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.ok()) << f.error();
    const gguf::Tensor* t = (*f)->tensor(tensor);
    ASSERT_NE(t, nullptr) << tensor;
    ASSERT_EQ(t->type, 0u) << tensor << " is not F32";
    at = (*f)->data_offset() + t->offset + index * 4;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(reinterpret_cast<const char*>(&nan), 4);
}

}  // namespace tkv
