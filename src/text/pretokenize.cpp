#include "text/pretokenize.h"

#include <unicode/uchar.h>

#include <cstdio>
#include <cstdlib>

#include "text/cpt_regex.h"

namespace tkv {
namespace {

constexpr uint32_t kEnd = 0xFFFFFFFF;  // "out of range" code point

struct Flags {
  bool valid = false, letter = false, number = false, whitespace = false, punct = false;
};

bool is_ws(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

Flags flags_of(uint32_t c) {
  Flags f;
  if (c == kEnd) return f;
  f.valid = true;
  f.whitespace = is_ws(c);
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      f.letter = true;
      break;
    case U_DECIMAL_DIGIT_NUMBER: case U_LETTER_NUMBER: case U_OTHER_NUMBER:
      f.number = true;
      break;
    case U_DASH_PUNCTUATION: case U_START_PUNCTUATION: case U_END_PUNCTUATION: case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION: case U_INITIAL_PUNCTUATION: case U_FINAL_PUNCTUATION:
      f.punct = true;
      break;
    default:
      break;
  }
  return f;
}

// ASCII lower case, and the long s (U+017F), whose simple case folding is 's':
// the models' (?i:'s|..) contractions match "'ſ" (Python's regex, tiktoken).
uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c == 0x17F ? 's' : c; }

using Cpts = std::vector<uint32_t>;
struct Span { size_t begin, end; };

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Cpts& c, Span s, std::vector<Span>& out) {
  auto cpt = [&](size_t p) { return p >= s.begin && p < s.end ? c[p] : kEnd; };
  auto fl = [&](size_t p) { return flags_of(cpt(p)); };
  size_t pos = s.begin, prev = s.begin;
  auto add = [&](size_t end) {
    if (end > prev) out.push_back({prev, end});
    prev = end;
    pos = end;
  };
  while (pos < s.end) {
    const uint32_t c0 = cpt(pos);
    const Flags f0 = fl(pos);
    if (c0 == '\'' && pos + 1 < s.end) {
      const uint32_t c1 = cpt(pos + 1);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') { add(pos + 2); continue; }
      if (pos + 2 < s.end) {
        const uint32_t c2 = cpt(pos + 2);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) { add(pos + 3); continue; }
      }
    }
    const Flags f2 = c0 == ' ' ? fl(pos + 1) : f0;
    if (f2.letter) {
      size_t p = pos + (c0 == ' ');
      while (fl(p).letter) ++p;
      add(p);
      continue;
    }
    if (f2.number) {
      size_t p = pos + (c0 == ' ');
      while (fl(p).number) ++p;
      add(p);
      continue;
    }
    if (!(f2.whitespace || f2.letter || f2.number) && f2.valid) {
      size_t p = pos + (c0 == ' ');
      for (Flags f = fl(p); !(f.whitespace || f.letter || f.number) && f.valid; f = fl(p)) ++p;
      add(p);
      continue;
    }
    size_t nws = 0;
    while (fl(pos + nws).whitespace) ++nws;
    if (nws > 1 && cpt(pos + nws) != kEnd) { add(pos + nws - 1); continue; }
    if (nws > 0) { add(pos + nws); continue; }
    add(pos + 1);
  }
}

// Llama 3 (digits_max 3) and Qwen2 (digits_max 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,k}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Cpts& c, Span s, std::vector<Span>& out, int digits_max) {
  auto cpt = [&](size_t p) { return p >= s.begin && p < s.end ? c[p] : kEnd; };
  auto fl = [&](size_t p) { return flags_of(cpt(p)); };
  size_t pos = s.begin, prev = s.begin;
  auto add = [&](size_t end) {
    if (end > prev) out.push_back({prev, end});
    prev = end;
    pos = end;
  };
  while (pos < s.end) {
    const uint32_t c0 = cpt(pos);
    const Flags f0 = fl(pos);
    if (c0 == '\'' && pos + 1 < s.end) {
      const uint32_t c1 = lower_ascii(cpt(pos + 1));
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') { add(pos + 2); continue; }
      if (pos + 2 < s.end) {
        const uint32_t c2 = lower_ascii(cpt(pos + 2));
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) { add(pos + 3); continue; }
      }
    }
    if (!(c0 == '\r' || c0 == '\n' || f0.number) && (f0.letter || fl(pos + 1).letter)) {
      size_t p = pos + 1;
      while (fl(p).letter) ++p;
      add(p);
      continue;
    }
    if (f0.number) {
      size_t p = pos, ini = pos;
      while (fl(p).number) {
        if (static_cast<int>(++p - ini) >= digits_max) {
          add(p);
          ini = p;
        }
      }
      add(p);
      continue;
    }
    const Flags f2 = c0 == ' ' ? fl(pos + 1) : f0;
    if (!(f2.whitespace || f2.letter || f2.number) && f2.valid) {
      size_t p = pos + (c0 == ' ');
      for (Flags f = fl(p); !(f.whitespace || f.letter || f.number) && f.valid; f = fl(p)) ++p;
      while (cpt(p) == '\r' || cpt(p) == '\n') ++p;
      add(p);
      continue;
    }
    size_t nws = 0, last_rn = 0;
    while (fl(pos + nws).whitespace) {
      const uint32_t w = cpt(pos + nws);
      if (w == '\r' || w == '\n') last_rn = pos + nws + 1;
      ++nws;
    }
    if (last_rn > 0) { add(last_rn); continue; }
    if (nws > 1 && cpt(pos + nws) != kEnd) { add(pos + nws - 1); continue; }
    if (nws > 0) { add(pos + nws); continue; }
    add(pos + 1);
  }
}

// A regex of the form [class]+ or [class]{k}: matched runs become their own
// pieces, the gaps between them stay pieces too.
template <class Pred>
void split_runs(const Cpts& c, Span s, std::vector<Span>& out, Pred in_class, size_t exact) {
  size_t prev = s.begin, pos = s.begin;
  while (pos < s.end) {
    if (!in_class(c[pos])) { ++pos; continue; }
    size_t p = pos;
    if (exact) {
      while (p < s.end && p - pos < exact && in_class(c[p])) ++p;
      if (p - pos < exact) { pos = p; continue; }
    } else {
      while (p < s.end && in_class(c[p])) ++p;
    }
    if (pos > prev) out.push_back({prev, pos});
    out.push_back({pos, p});
    prev = pos = p;
  }
  if (s.end > prev) out.push_back({prev, s.end});
}

// A regex applied as llama.cpp's unicode_regex_split applies it: every match
// becomes a piece and so does every gap between matches. `match(p, s)`
// returns the end of the leftmost-longest match starting at p, or p when
// none starts there.
template <class Match>
void split_matches(Span s, std::vector<Span>& out, Match match) {
  size_t prev = s.begin, pos = s.begin;
  while (pos < s.end) {
    const size_t e = match(pos, s);
    if (e == pos) { ++pos; continue; }
    if (pos > prev) out.push_back({prev, pos});
    out.push_back({pos, e});
    prev = pos = e;
  }
  if (s.end > prev) out.push_back({prev, s.end});
}

// Tiny Aya's first regex, \d{1,3}(?=(?:\d{3})*\b), without its quadratic
// lookahead (a backtracking matcher rescans the rest of a digit run from
// every position: 4 s for 40,000 digits). From a position p in a run of
// decimal digits ending at e, it matches (e - p) % 3 digits (3 if that is
// 0) when e is a word boundary (the piece's end, or a character that is not
// \w), and nothing otherwise: inside the run there is no boundary.
void split_digit_groups(const Cpts& c, Span s, std::vector<Span>& out) {
  size_t run_begin = s.begin, run_end = s.begin;  // the run last measured
  bool boundary = false;
  split_matches(s, out, [&](size_t p, Span sp) {
    if (!regex_digit(c[p])) return p;
    if (p < run_begin || p >= run_end) {
      run_begin = p;
      run_end = p;
      while (run_end < sp.end && regex_digit(c[run_end])) ++run_end;
      boundary = run_end == sp.end || !regex_word_char(c[run_end]);
    }
    if (!boundary) return p;
    const size_t r = (run_end - p) % 3;
    return p + (r ? r : 3);
  });
}

struct CpRange { uint32_t lo, hi; };
template <size_t N>
bool in_ranges(const CpRange (&r)[N], uint32_t x) {
  for (const CpRange& c : r)
    if (x >= c.lo && x <= c.hi) return true;
  return false;
}

// DeepSeek LLM's classes, as its regexes list them (llama.cpp runs these with
// std::wregex, whose \s in the classic locale is ASCII whitespace only).
constexpr CpRange kDsLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943}};
constexpr CpRange kDsPunct[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
                                {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};
constexpr CpRange kDsCjk[] = {{0x4E00, 0x9FA5}, {0x800, 0x4E00}, {0xAC00, 0xD7FF}};

bool ascii_space(uint32_t x) { return x == ' ' || (x >= '\t' && x <= '\r'); }

// DeepSeek LLM: [\r\n] | \s?[letters]+ | \s?[punct]+ | \s+$ | [CJK]+ | \p{N}+,
// each applied to the pieces the previous ones left.
void split_deepseek_llm(const Cpts& c, std::vector<Span>& spans, std::vector<Span>& next) {
  auto apply = [&](auto&& match) {
    next.clear();
    for (const Span& s : spans) split_matches(s, next, match);
    spans.swap(next);
  };
  apply([&](size_t p, Span) { return c[p] == '\r' || c[p] == '\n' ? p + 1 : p; });
  // \s?[class]+: a space is taken only when a class character follows it.
  auto space_then_run = [&](const auto& in_class) {
    return [&c, in_class](size_t p, Span s) {
      size_t q = p;
      if (ascii_space(c[q]) && q + 1 < s.end && in_class(c[q + 1])) ++q;
      if (!in_class(c[q])) return p;
      while (q < s.end && in_class(c[q])) ++q;
      return q;
    };
  };
  apply(space_then_run([](uint32_t x) { return in_ranges(kDsLetters, x); }));
  apply(space_then_run([](uint32_t x) { return in_ranges(kDsPunct, x); }));
  apply([&](size_t p, Span s) {  // \s+$: the piece's trailing run of spaces
    size_t t = s.end;
    while (t > s.begin && ascii_space(c[t - 1])) --t;
    return p >= t && p < s.end ? s.end : p;
  });
  auto run_of = [&](const auto& in_class) {
    return [&c, in_class](size_t p, Span s) {
      size_t q = p;
      while (q < s.end && in_class(c[q])) ++q;
      return q;
    };
  };
  apply(run_of([](uint32_t x) { return in_ranges(kDsCjk, x); }));
  apply(run_of([](uint32_t x) { return flags_of(x).number; }));
}

}  // namespace

std::vector<uint32_t> utf8_to_cpts(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char b = s[i];
    uint32_t c;
    size_t n;
    if (b < 0x80) { c = b; n = 1; }
    else if ((b >> 5) == 6) { c = b & 0x1F; n = 2; }
    else if ((b >> 4) == 14) { c = b & 0x0F; n = 3; }
    else if ((b >> 3) == 30) { c = b & 0x07; n = 4; }
    else { out.push_back(0xFFFD); ++i; continue; }  // invalid lead byte
    if (i + n > s.size()) { out.push_back(0xFFFD); break; }
    bool ok = true;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char cb = s[i + k];
      if ((cb >> 6) != 2) { ok = false; break; }
      c = (c << 6) | (cb & 0x3F);
    }
    if (!ok) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(c);
    i += n;
  }
  return out;
}

std::string cpt_to_utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

namespace {

// The regexes each kind applies in turn, in the `regex` module's syntax (the
// tests run the same lists in Python's `regex` as the reference). Written as
// the models' own tokenizer.json / tiktoken patterns where llama.cpp rewrites
// them for std::regex: llama.cpp collapses every letter to one category
// byte, so its rewritten GPT-4o and Tekken patterns tell upper from lower
// case for A-Z only, where the models' patterns (kept here) use \p{Lu} and
// \p{Ll}; its (?:'[sS]|..) spellings stand for (?i:'s|..).
const char* const kGpt2Rx = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
const char* const kQwen2Rx =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kCjkDsRx = R"re([\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+)re";
const char* const kCjkKanaRx = R"re([\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+)re";
const char* const kDsV3Rx =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
const char* const kCaseWordsRx =  // cl200k-style words: an optional upper-case run, then lower case (or the reverse)
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)re";
const char* const kBloomRx = R"re( ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+)re";

struct RegexKind {
  PreTokenizer kind;
  std::vector<std::string> exprs;
};

const std::vector<RegexKind>& regex_kinds() {
  static const std::vector<RegexKind> kinds = {
      {PreTokenizer::kDefault, {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2Rx, R"re(\p{N}+)re", "[0-9][0-9][0-9]"}},
      {PreTokenizer::kDeepseekCoder, {"[\\r\\n]", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjkDsRx, R"re(\p{N})re"}},
      {PreTokenizer::kDeepseekV3, {R"re(\p{N}{1,3})re", kCjkKanaRx, kDsV3Rx}},
      {PreTokenizer::kSpark2_5,
       {R"re(\p{N}{1,3})re", kCjkKanaRx,
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re",
        R"re(\p{N})re"}},
      {PreTokenizer::kYoutu,
       {R"re([\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+)re",
        std::string(kCaseWordsRx) + R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kGpt4o,
       {std::string(kCaseWordsRx) + R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kTekken,
       {R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kQwen35,
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      // Kimi K2's tiktoken pattern writes its letter classes as
      // [..&&[^\p{Han}]]; a lookahead says the same.
      {PreTokenizer::kKimiK2,
       {R"re(\p{Han}+|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kSeedCoder,
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kBailingMoe,
       {R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kUfakzeka,
       {R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kExaoneMoe,
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kMinicpm5,
       {R"re(\p{N}{1,3})re",
        R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
      {PreTokenizer::kLaguna, {R"re([^\n]+|[\n]+)re", kQwen2Rx}},
      {PreTokenizer::kJais2,
       {R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re"}},
      {PreTokenizer::kBloom, {kBloomRx}},
      {PreTokenizer::kViking, {kBloomRx, R"re(\p{N})re"}},
      {PreTokenizer::kChameleon,
       {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"re(\p{N})re",
        R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2Rx}},
      {PreTokenizer::kTinyAya,
       {R"re(\d{1,3}(?=(?:\d{3})*\b))re",
        std::string(kCaseWordsRx) + R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"}},
  };
  return kinds;
}

// tokenizer.ggml.pre names (llama.cpp's llama-vocab.cpp) and what they run.
struct PreName {
  const char* name;
  PreTokenizer kind;
  bool ignore_merges;
};
constexpr PreName kPreNames[] = {
    {"default", PreTokenizer::kDefault, false},
    {"gpt-2", PreTokenizer::kGpt2, false},         {"gpt2", PreTokenizer::kGpt2, false},
    {"phi-2", PreTokenizer::kGpt2, false},         {"jina-es", PreTokenizer::kGpt2, false},
    {"jina-de", PreTokenizer::kGpt2, false},       {"gigachat", PreTokenizer::kGpt2, false},
    {"jina-v2-es", PreTokenizer::kGpt2, false},    {"jina-v2-de", PreTokenizer::kGpt2, false},
    {"a.x-4.0", PreTokenizer::kGpt2, false},       {"mellum", PreTokenizer::kGpt2, false},
    {"modern-bert", PreTokenizer::kGpt2, false},   {"jina-v1-en", PreTokenizer::kGpt2, false},
    {"jina-v2-code", PreTokenizer::kGpt2, false},  {"roberta-bpe", PreTokenizer::kGpt2, false},
    {"exaone4", PreTokenizer::kGpt2, false},       {"mpt", PreTokenizer::kGpt2, false},
    {"olmo", PreTokenizer::kGpt2, false},          {"jais", PreTokenizer::kGpt2, false},
    {"trillion", PreTokenizer::kGpt2, false},      {"granite-docling", PreTokenizer::kGpt2, false},
    {"llama3", PreTokenizer::kLlama3, true},       {"llama-v3", PreTokenizer::kLlama3, true},
    {"llama-bpe", PreTokenizer::kLlama3, true},    {"falcon3", PreTokenizer::kLlama3, true},
    {"falcon-h1", PreTokenizer::kLlama3, true},    {"pixtral", PreTokenizer::kLlama3, true},
    {"midm-2.0", PreTokenizer::kLlama3, true},     {"lfm2", PreTokenizer::kLlama3, true},
    {"jina-v5-nano", PreTokenizer::kLlama3, true}, {"dbrx", PreTokenizer::kLlama3, false},
    {"smaug-bpe", PreTokenizer::kLlama3, false},   {"glm4", PreTokenizer::kLlama3, false},
    {"chatglm-bpe", PreTokenizer::kLlama3, false},
    {"qwen2", PreTokenizer::kQwen2, false},        {"deepseek-r1-qwen", PreTokenizer::kQwen2, false},
    {"kormo", PreTokenizer::kQwen2, false},        {"f2llmv2", PreTokenizer::kQwen2, false},
    {"megrez", PreTokenizer::kQwen2, false},       {"stablelm2", PreTokenizer::kQwen2, false},
    {"hunyuan", PreTokenizer::kQwen2, false},      {"solar-open", PreTokenizer::kQwen2, false},
    {"grok-2", PreTokenizer::kQwen2, false},
    {"starcoder", PreTokenizer::kStarcoder, false}, {"refact", PreTokenizer::kStarcoder, false},
    {"command-r", PreTokenizer::kStarcoder, false}, {"smollm", PreTokenizer::kStarcoder, false},
    {"codeshell", PreTokenizer::kStarcoder, false}, {"exaone", PreTokenizer::kStarcoder, false},
    {"minerva-7b", PreTokenizer::kStarcoder, false}, {"mellum2", PreTokenizer::kStarcoder, false},
    {"falcon", PreTokenizer::kFalcon, false},
    {"deepseek-llm", PreTokenizer::kDeepseekLlm, false},
    {"deepseek-coder", PreTokenizer::kDeepseekCoder, false},
    {"deepseek-v3", PreTokenizer::kDeepseekV3, false},  {"hunyuan-dense", PreTokenizer::kDeepseekV3, false},
    {"joyai-llm", PreTokenizer::kDeepseekV3, false},    {"hy_v4", PreTokenizer::kDeepseekV3, false},
    {"spark2_5", PreTokenizer::kSpark2_5, false},       {"youtu", PreTokenizer::kYoutu, true},
    {"gpt-4o", PreTokenizer::kGpt4o, false},            {"llama4", PreTokenizer::kGpt4o, false},
    {"kanana2", PreTokenizer::kGpt4o, false},           {"talkie", PreTokenizer::kGpt4o, false},
    {"minimax-m2", PreTokenizer::kGpt4o, false},        {"tekken", PreTokenizer::kTekken, true},
    {"qwen35", PreTokenizer::kQwen35, false},           {"kimi-k2", PreTokenizer::kKimiK2, false},
    {"seed-coder", PreTokenizer::kSeedCoder, false},    {"bailingmoe", PreTokenizer::kBailingMoe, false},
    {"bailingmoe2", PreTokenizer::kBailingMoe, false},  {"llada-moe", PreTokenizer::kBailingMoe, false},
    {"ufakzeka", PreTokenizer::kUfakzeka, false},       {"exaone-moe", PreTokenizer::kExaoneMoe, false},
    {"minicpm5", PreTokenizer::kMinicpm5, true},        {"laguna", PreTokenizer::kLaguna, false},
    {"jais-2", PreTokenizer::kJais2, false},            {"poro-chat", PreTokenizer::kBloom, false},
    {"bloom", PreTokenizer::kBloom, false},             {"gpt3-finnish", PreTokenizer::kBloom, false},
    {"viking", PreTokenizer::kViking, false},           {"chameleon", PreTokenizer::kChameleon, false},
    {"tiny_aya", PreTokenizer::kTinyAya, false},        {"cohere2moe", PreTokenizer::kTinyAya, false},
};

// The compiled regexes of every regex kind, built once (the patterns are
// constants: a failure here is a bug the tests catch).
const std::vector<CptRegex>& compiled(PreTokenizer kind) {
  static const auto all = [] {
    std::vector<std::pair<PreTokenizer, std::vector<CptRegex>>> out;
    for (const RegexKind& k : regex_kinds()) {
      std::vector<CptRegex> rx;
      for (const std::string& e : k.exprs) {
        auto r = CptRegex::compile(e);
        if (!r) {
          std::fprintf(stderr, "turbokv: %s\n", r.error().c_str());
          std::abort();
        }
        rx.push_back(std::move(*r));
      }
      out.emplace_back(k.kind, std::move(rx));
    }
    return out;
  }();
  for (const auto& [k, rx] : all)
    if (k == kind) return rx;
  static const std::vector<CptRegex> none;
  return none;
}

}  // namespace

bool pre_tokenizer_from_name(std::string_view n, PreTokenizer& out, bool* ignore_merges) {
  for (const PreName& p : kPreNames)
    if (n == p.name) {
      out = p.kind;
      if (ignore_merges) *ignore_merges = p.ignore_merges;
      return true;
    }
  return false;
}

std::string pre_tokenizer_names() {
  std::string s;
  for (const PreName& p : kPreNames) s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

const std::vector<std::string>& pre_tokenizer_regexes(PreTokenizer kind) {
  for (const RegexKind& k : regex_kinds())
    if (k.kind == kind) return k.exprs;
  static const std::vector<std::string> none;
  return none;
}

std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer kind) {
  const Cpts c = utf8_to_cpts(text);
  std::vector<Span> spans = {{0, c.size()}}, next;
  auto apply = [&](auto&& fn) {
    next.clear();
    for (const Span& s : spans) fn(s, next);
    spans.swap(next);
  };
  auto digit = [](uint32_t x) { return flags_of(x).number; };
  auto falcon_class = [](uint32_t x) {
    return flags_of(x).punct || x == '$' || x == '+' || x == '<' || x == '=' || x == '>' || x == '^' || x == '~' ||
           x == '|' || x == '`';
  };
  auto ascii_digit = [](uint32_t x) { return x >= '0' && x <= '9'; };
  switch (kind) {
    case PreTokenizer::kGpt2:
      apply([&](Span s, std::vector<Span>& o) { split_gpt2(c, s, o); });
      break;
    case PreTokenizer::kLlama3:
      apply([&](Span s, std::vector<Span>& o) { split_llama3(c, s, o, 3); });
      break;
    case PreTokenizer::kQwen2:
      apply([&](Span s, std::vector<Span>& o) { split_llama3(c, s, o, 1); });
      break;
    case PreTokenizer::kStarcoder:
      apply([&](Span s, std::vector<Span>& o) { split_runs(c, s, o, digit, 1); });
      apply([&](Span s, std::vector<Span>& o) { split_gpt2(c, s, o); });
      break;
    case PreTokenizer::kFalcon:
      apply([&](Span s, std::vector<Span>& o) { split_runs(c, s, o, falcon_class, 0); });
      apply([&](Span s, std::vector<Span>& o) { split_gpt2(c, s, o); });
      apply([&](Span s, std::vector<Span>& o) { split_runs(c, s, o, ascii_digit, 3); });
      break;
    case PreTokenizer::kDeepseekLlm:
      split_deepseek_llm(c, spans, next);
      break;
    default: {  // the regex kinds: each regex splits every piece into matches and the gaps between them
      const auto& rxs = compiled(kind);
      for (size_t i = 0; i < rxs.size(); ++i) {
        if (kind == PreTokenizer::kTinyAya && i == 0) {
          apply([&](Span s, std::vector<Span>& o) { split_digit_groups(c, s, o); });
          continue;
        }
        apply([&](Span s, std::vector<Span>& o) {
          split_matches(s, o, [&](size_t p, Span sp) {
            const size_t e = rxs[i].match_at(c.data(), sp.begin, sp.end, p);
            return e == CptRegex::kNoMatch ? p : e;
          });
        });
      }
      break;
    }
  }
  std::vector<std::string> out;
  for (const Span& s : spans) {
    std::string piece;
    for (size_t i = s.begin; i < s.end; ++i) piece += cpt_to_utf8(c[i]);
    out.push_back(std::move(piece));
  }
  return out;
}

}  // namespace tkv
