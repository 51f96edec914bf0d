// JSON as the tools print it and append it to --json-out files: strings from
// models, texts and file names may hold bytes that are not UTF-8; they are
// replaced (U+FFFD) rather than failing the run.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tkv {

inline std::string json_text(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tkv
