// Files and folders a test writes under the test temp dir: the name takes
// the process id (tests run in parallel), and the path is removed, with
// anything under it, when the object goes (a failed assertion included).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace tkv {

class TempPath {
 public:
  explicit TempPath(const std::string& name)
      : path_(testing::TempDir() + std::to_string(getpid()) + "_" + name) {}
  ~TempPath() {
    std::error_code ec;  // (nothing to report from a destructor: a path never written is fine)
    std::filesystem::remove_all(path_, ec);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::string& str() const { return path_; }
  operator const std::string&() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tkv
