#include "text/text_stream.h"

#include <algorithm>

namespace tkv {
namespace {

// Bytes a sequence led by b needs (0: b cannot start one).
int utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether c may follow lead b as the sequence's byte i (1-based). The second
// byte's range is narrowed for some leads to exclude overlongs, surrogates and
// code points above U+10FFFF; later bytes are any continuation byte.
bool utf8_continues(unsigned char b, int i, unsigned char c) {
  if (i == 1) {
    if (b == 0xE0) return c >= 0xA0 && c <= 0xBF;
    if (b == 0xED) return c >= 0x80 && c <= 0x9F;
    if (b == 0xF0) return c >= 0x90 && c <= 0xBF;
    if (b == 0xF4) return c >= 0x80 && c <= 0x8F;
  }
  return c >= 0x80 && c <= 0xBF;
}

// Decodes the sequence at s[i]: returns its length when complete and valid,
// otherwise -(length of the maximal ill-formed subpart, >= 1).
int utf8_step(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = utf8_length(b);
  if (len == 0) return -1;
  int k = 1;
  while (k < len && i + k < s.size() && utf8_continues(b, k, static_cast<unsigned char>(s[i + k]))) ++k;
  return k == len ? len : -k;
}

constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n < 0) return false;
    i += size_t(n);
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_step(s, i);
    if (n > 0) {
      out.append(s.substr(i, size_t(n)));
      i += size_t(n);
    } else {
      out += kReplacement;
      i += size_t(-n);
    }
  }
  return out;
}

size_t utf8_incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[s.size() - k]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: the lead is further back
    const int len = utf8_length(b);
    if (len <= int(k)) return 0;  // ASCII, an invalid lead, or a sequence already long enough
    for (size_t j = 1; j < k; ++j)
      if (!utf8_continues(b, int(j), static_cast<unsigned char>(s[s.size() - k + j]))) return 0;
    return k;
  }
  return 0;
}

TextStream::TextStream(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::push(const std::string& piece) {
  if (stopped_ || finished_) return "";
  pending_ += piece;
  // Earliest stop in pending_. A stop cannot have begun in text already
  // returned: any tail that could start one is always held back below.
  size_t at = std::string::npos;
  for (const auto& s : stops_) at = std::min(at, pending_.find(s));
  if (at != std::string::npos) {
    stopped_ = true;
    std::string out = utf8_sanitize(std::string_view(pending_).substr(0, at));
    pending_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of a stop, and an unfinished
  // character. Both cuts fall before a byte that starts a character, where
  // sanitizing the halves separately equals sanitizing the whole.
  size_t hold = utf8_incomplete_tail(pending_);
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  const size_t emit = pending_.size() - hold;
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, emit));
  pending_.erase(0, emit);
  return out;
}

std::string TextStream::finish() {
  if (stopped_ || finished_) return "";
  finished_ = true;
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace tkv
