// Whole-file reads for text inputs (prompts, evaluation text, haystacks).
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "util/status.h"

namespace tkv {

inline Expected<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Error(path + ": read failed");
  return ss.str();
}

// A file, or every *.txt file of a directory in name order, joined by blank
// lines (calibration corpora such as shared/data/niah/*/).
inline Expected<std::string> read_text_path(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return read_text_file(path);
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path().string());
  if (ec) return Status::Error(path + ": " + ec.message());
  if (files.empty()) return Status::Error(path + ": no .txt files in the directory");
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& f : files) {
    auto t = read_text_file(f);
    if (!t) return t.status();
    if (!all.empty()) all += "\n\n";
    all += *t;
  }
  return all;
}

}  // namespace tkv
