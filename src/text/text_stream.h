// Streaming detokenized text: token pieces are raw bytes (a multi-byte
// character may be split across tokens) and a request may name stop strings
// that must not be sent. TextStream releases only text that can no longer
// change, so the concatenation of everything it returns equals the
// non-streamed result: utf8_sanitize(the whole text cut at the first stop).
// Used by the server (streamed responses), `run` and the C API (tkv_generate).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace tkv {

// True when s is well-formed UTF-8 (no overlongs, surrogates or > U+10FFFF).
bool utf8_valid(std::string_view s);

// s with each ill-formed sequence (each maximal subpart, as Unicode recommends)
// replaced by U+FFFD, including an incomplete sequence at the very end. JSON
// output must be valid UTF-8, and a model may emit any bytes.
std::string utf8_sanitize(std::string_view s);

// Length of the trailing bytes of s that begin a multi-byte character but do
// not complete it yet (0 to 3): more bytes may still make them valid.
size_t utf8_incomplete_tail(std::string_view s);

class TextStream {
 public:
  // Empty stop strings are ignored (the request parser rejects them anyway).
  explicit TextStream(std::vector<std::string> stops);

  // Adds a token's bytes; returns the text now safe to send (maybe empty).
  // Held back: an incomplete UTF-8 tail and any tail that may start a stop
  // string. Once a stop string appears, returns the text before it and drops
  // everything after, now and in later calls.
  std::string push(const std::string& piece);

  // True once a stop string was seen (finish_reason "stop").
  bool stopped() const { return stopped_; }

  // End of generation: returns what was held back (an incomplete UTF-8 tail
  // becomes U+FFFD). Later push/finish calls return "".
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // bytes received but not yet returned
  bool stopped_ = false, finished_ = false;
};

}  // namespace tkv
