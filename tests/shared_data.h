// Tests that read ../shared (models, texts, vocabularies, real K/V vectors).
// Missing data skips such a test naming every missing path, except where
// CI is set (as it is in CI) or TKV_REQUIRE_SHARED=1: there it fails, so the
// suite cannot go green without the data it claims to check against.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>

namespace tkv {

inline bool shared_data_required() {
  const char* ci = std::getenv("CI");
  const char* req = std::getenv("TKV_REQUIRE_SHARED");
  const bool in_ci = ci && *ci && std::strcmp(ci, "0") != 0 && std::strcmp(ci, "false") != 0;
  return in_ci || (req && std::strcmp(req, "1") == 0);
}

// The paths (relative to ../shared, or absolute) that do not exist, joined.
inline std::string missing_shared(std::initializer_list<std::string> paths) {
  std::string out;
  for (const std::string& p : paths) {
    const std::string full = p.empty() || p[0] == '/' ? p : std::string(TKV_SHARED_DIR) + "/" + p;
    if (std::filesystem::exists(full)) continue;
    if (!out.empty()) out += ", ";
    out += full;
  }
  return out;
}

inline std::string shared_path(const std::string& rel) { return std::string(TKV_SHARED_DIR) + "/" + rel; }

}  // namespace tkv

// Checks every path before the test uses any: skips (or, under CI or
// TKV_REQUIRE_SHARED=1, fails) naming all that are missing.
#define TKV_NEED_SHARED(...)                                                                                  \
  do {                                                                                                        \
    const std::string tkv_missing_ = ::tkv::missing_shared({__VA_ARGS__});                                    \
    if (!tkv_missing_.empty()) {                                                                              \
      if (::tkv::shared_data_required()) FAIL() << "missing shared data (required: CI or TKV_REQUIRE_SHARED=1): " \
                                                << tkv_missing_;                                              \
      GTEST_SKIP() << "missing shared data: " << tkv_missing_;                                                \
    }                                                                                                         \
  } while (0)
