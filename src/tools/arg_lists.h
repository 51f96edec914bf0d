// Comma-separated command-line lists ("1024,4096", "f16,tq4"), shared by the
// benchmark subcommands; bad items throw std::invalid_argument naming the flag.
#pragma once
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tkv {

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

inline std::vector<int> parse_int_list(const std::string& s, const char* flag, long min_value) {
  std::vector<int> out;
  for (const auto& item : split_list(s)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < min_value || v > (1 << 24))
      throw std::invalid_argument(std::string("bad ") + flag + " value '" + item + "'");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw std::invalid_argument(std::string("empty ") + flag + " list");
  return out;
}

// -t lists of the benchmark tools: 0 means every core (`cores`), as -t 0
// does for every tool.
inline std::vector<int> parse_threads_list(const std::string& s, int cores) {
  std::vector<int> t = parse_int_list(s, "-t", 0);
  for (int& v : t)
    if (v == 0) v = cores;
  return t;
}

}  // namespace tkv
