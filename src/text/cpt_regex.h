// A small backtracking regular-expression matcher over Unicode code points,
// for the pre-tokenizer regexes that GGUF models name in tokenizer.ggml.pre
// (llama.cpp's lists; docs/ARCHITECTURE.md "Tokenizers"). The frequent ones
// (GPT-2, Llama 3, Qwen2, ...) have hand-written splitters in
// pretokenize.cpp; the others are these regexes, matched with the semantics
// of Python's `regex` module (leftmost match, alternatives in order, greedy
// quantifiers backtracking), which the tests compare against.
//
// Syntax: literals, `.`, escapes \r \n \t \f \v \\ and any escaped
// punctuation, \uXXXX, \x{...}, \s \S \d \D \w \W, \p{..} / \P{..} with the
// general categories L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P S Z C and the
// scripts Han Hiragana Katakana Hangul Latin; classes [...] with ranges,
// negation and those escapes; groups ( ), (?: ), (?i: ) (case-insensitive,
// simple case folding), lookahead (?= ) (?! ); quantifiers ? * + {n} {n,}
// {n,m}, each greedy, lazy (?) or possessive (+); anchors ^ $ (the start and
// end of the piece being split) and \b (a word boundary, \w as `regex` has it).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tkv {

// \d and \w as the matcher (and `regex`) read them: decimal digits (Nd), and
// alphabetic, marks, Nd, connector punctuation, join controls.
bool regex_digit(uint32_t c);
bool regex_word_char(uint32_t c);

class CptRegex {
 public:
  // Errors name the pattern and the offset of what is not understood.
  static Expected<CptRegex> compile(std::string_view pattern);
  CptRegex(CptRegex&&) noexcept;
  CptRegex& operator=(CptRegex&&) noexcept;
  ~CptRegex();

  static constexpr size_t kNoMatch = static_cast<size_t>(-1);
  // The end of the match that starts exactly at p within c[begin, end), or
  // kNoMatch when none does. Empty matches count as none.
  size_t match_at(const uint32_t* c, size_t begin, size_t end, size_t p) const;

  struct Node;

 private:
  CptRegex();
  std::unique_ptr<Node> root_;
};

}  // namespace tkv
