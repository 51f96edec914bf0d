// Runs the turbokv binary of this build in a temporary directory per test
// (stdout and stderr captured), for the CLI tests; a command that hangs is
// stopped after 300 s (exit status 124) instead of holding the suite.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tkv {

struct CliResult {
  int rc;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tkv_cli_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  CliResult run(const std::string& args) const {
    const std::string cmd =
        std::string("timeout 300 '") + TKV_BINARY + "' " + args + " >'" + path("stdout") + "' 2>'" + path("stderr") + "'";
    const int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(path("stdout")), slurp(path("stderr"))};
  }
  std::filesystem::path dir_;
};

}  // namespace tkv
