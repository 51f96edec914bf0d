// Text placed inside XML/HTML elements (SVG charts, the HTML report): titles
// and labels may hold file names and model names.
#pragma once
#include <string>
#include <string_view>

namespace tkv {

inline std::string xml_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace tkv
