#include "model/pretokenize.h"

#include <unicode/uchar.h>

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

uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

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

bool pre_tokenizer_from_name(std::string_view n, PreTokenizer& out) {
  if (n == "default" || n == "gpt-2" || n == "gpt2" || n == "phi-2" || n == "jina-es" || n == "jina-de" ||
      n == "jina-v2-es" || n == "jina-v2-de" || n == "jina-v2-code" || n == "olmo" || n == "jais") {
    out = PreTokenizer::kGpt2;
  } else if (n == "llama-bpe" || n == "llama3" || n == "smaug-bpe" || n == "falcon3") {
    out = PreTokenizer::kLlama3;
  } else if (n == "qwen2" || n == "deepseek-r1-qwen") {
    out = PreTokenizer::kQwen2;
  } else if (n == "starcoder" || n == "refact" || n == "command-r" || n == "smollm" || n == "codeshell") {
    out = PreTokenizer::kStarcoder;
  } else if (n == "falcon") {
    out = PreTokenizer::kFalcon;
  } else if (n == "deepseek-llm") {
    out = PreTokenizer::kDeepseekLlm;
  } else {
    return false;
  }
  return true;
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
