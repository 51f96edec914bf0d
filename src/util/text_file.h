// Whole-file reads for text inputs (prompts, evaluation text, haystacks).
#pragma once
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace tkv
