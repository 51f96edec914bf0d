#include "text/cpt_regex.h"

#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <functional>

#include "text/pretokenize.h"

namespace tkv {
namespace {

// Code-point predicates an escape or \p{..} names.
enum class Pred {
  kAny,  // `.`: anything but \n
  kSpace, kDigit, kWord,
  kL, kLu, kLl, kLt, kLm, kLo, kM, kMn, kMc, kMe, kN, kNd, kNl, kNo, kP, kS, kZ, kC,
  kHan, kHiragana, kKatakana, kHangul, kLatin,
};

// Unicode White_Space, which `regex`'s \s matches.
bool white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool script_is(uint32_t c, UScriptCode s) {
  UErrorCode e = U_ZERO_ERROR;
  return uscript_getScript(static_cast<UChar32>(c), &e) == s && U_SUCCESS(e);
}

bool pred_has(Pred p, uint32_t c) {
  const int t = u_charType(static_cast<UChar32>(c));
  const uint32_t m = U_MASK(t);
  switch (p) {
    case Pred::kAny: return c != '\n';
    case Pred::kSpace: return white_space(c);
    case Pred::kDigit: return t == U_DECIMAL_DIGIT_NUMBER;
    case Pred::kWord:
      return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_ALPHABETIC) || (m & U_GC_M_MASK) ||
             t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION ||
             u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_JOIN_CONTROL);
    case Pred::kL: return (m & U_GC_L_MASK) != 0;
    case Pred::kLu: return t == U_UPPERCASE_LETTER;
    case Pred::kLl: return t == U_LOWERCASE_LETTER;
    case Pred::kLt: return t == U_TITLECASE_LETTER;
    case Pred::kLm: return t == U_MODIFIER_LETTER;
    case Pred::kLo: return t == U_OTHER_LETTER;
    case Pred::kM: return (m & U_GC_M_MASK) != 0;
    case Pred::kMn: return t == U_NON_SPACING_MARK;
    case Pred::kMc: return t == U_COMBINING_SPACING_MARK;
    case Pred::kMe: return t == U_ENCLOSING_MARK;
    case Pred::kN: return (m & U_GC_N_MASK) != 0;
    case Pred::kNd: return t == U_DECIMAL_DIGIT_NUMBER;
    case Pred::kNl: return t == U_LETTER_NUMBER;
    case Pred::kNo: return t == U_OTHER_NUMBER;
    case Pred::kP: return (m & U_GC_P_MASK) != 0;
    case Pred::kS: return (m & U_GC_S_MASK) != 0;
    case Pred::kZ: return (m & U_GC_Z_MASK) != 0;
    case Pred::kC: return (m & U_GC_C_MASK) != 0;
    case Pred::kHan: return script_is(c, USCRIPT_HAN);
    case Pred::kHiragana: return script_is(c, USCRIPT_HIRAGANA);
    case Pred::kKatakana: return script_is(c, USCRIPT_KATAKANA);
    case Pred::kHangul: return script_is(c, USCRIPT_HANGUL);
    case Pred::kLatin: return script_is(c, USCRIPT_LATIN);
  }
  return false;
}

bool pred_from_name(const std::string& n, Pred& p) {
  static const std::pair<const char*, Pred> kNames[] = {
      {"L", Pred::kL},     {"Lu", Pred::kLu},   {"Ll", Pred::kLl},       {"Lt", Pred::kLt},
      {"Lm", Pred::kLm},   {"Lo", Pred::kLo},   {"M", Pred::kM},         {"Mn", Pred::kMn},
      {"Mc", Pred::kMc},   {"Me", Pred::kMe},   {"N", Pred::kN},         {"Nd", Pred::kNd},
      {"Nl", Pred::kNl},   {"No", Pred::kNo},   {"P", Pred::kP},         {"S", Pred::kS},
      {"Z", Pred::kZ},     {"C", Pred::kC},     {"Han", Pred::kHan},     {"Hiragana", Pred::kHiragana},
      {"Katakana", Pred::kKatakana},            {"Hangul", Pred::kHangul}, {"Latin", Pred::kLatin},
      {"Letter", Pred::kL}, {"Number", Pred::kN}, {"Mark", Pred::kM},  {"Punctuation", Pred::kP},
      {"Symbol", Pred::kS}};
  for (const auto& [name, pred] : kNames)
    if (n == name) {
      p = pred;
      return true;
    }
  return false;
}

struct Item {
  bool is_pred = false, negated = false;  // negated: \S, \D, \W, \P{..}
  Pred pred = Pred::kAny;
  uint32_t lo = 0, hi = 0;
};

}  // namespace

struct CptRegex::Node {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kLook, kBegin, kEnd, kWordBoundary } kind = kSeq;
  // kSet
  std::vector<Item> items;
  bool negated = false, icase = false;
  // kSeq, kAlt: the parts; kRepeat, kLook: kids[0]
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = -1;  // kRepeat; max -1: unbounded
  enum Mode { kGreedy, kLazy, kPossessive } mode = kGreedy;
  bool look_negative = false;

  bool item_has(const Item& it, uint32_t c) const {
    const bool in = it.is_pred ? pred_has(it.pred, c) : (c >= it.lo && c <= it.hi);
    return in != it.negated;
  }
  bool set_has(uint32_t c) const {
    bool in = false;
    for (const Item& it : items) {
      if (item_has(it, c)) { in = true; break; }
      if (icase) {  // simple case folding, as `regex` matches under (?i)
        const uint32_t alts[] = {static_cast<uint32_t>(u_foldCase(static_cast<UChar32>(c), U_FOLD_CASE_DEFAULT)),
                                 static_cast<uint32_t>(u_tolower(static_cast<UChar32>(c))),
                                 static_cast<uint32_t>(u_toupper(static_cast<UChar32>(c)))};
        bool hit = false;
        for (uint32_t a : alts) hit = hit || (a != c && item_has(it, a));
        if (!hit && !it.is_pred && it.lo == it.hi) {  // a literal whose fold is c's
          const uint32_t f = static_cast<uint32_t>(u_foldCase(static_cast<UChar32>(it.lo), U_FOLD_CASE_DEFAULT));
          hit = f == alts[0];
        }
        if (hit) { in = true; break; }
      }
    }
    return in != negated;
  }
};

namespace {

using Node = CptRegex::Node;

class Parser {
 public:
  explicit Parser(std::string_view pattern) : pat_(pattern), p_(utf8_to_cpts(pattern)) {}

  Expected<std::unique_ptr<Node>> parse() {
    auto n = alt(false);
    if (!err_.empty()) return Status::Error(err_);
    if (i_ < p_.size()) return fail("an unmatched ')'");
    return n;
  }

 private:
  Status fail(const std::string& what) {
    if (err_.empty())
      err_ = "pre-tokenizer regex '" + std::string(pat_) + "': " + what + " at code point " + std::to_string(i_);
    return Status::Error(err_);
  }
  bool eof() const { return i_ >= p_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0xFFFFFFFF; }

  std::unique_ptr<Node> alt(bool icase) {
    auto a = std::make_unique<Node>();
    a->kind = Node::kAlt;
    a->kids.push_back(seq(icase));
    while (err_.empty() && peek() == '|') {
      ++i_;
      a->kids.push_back(seq(icase));
    }
    return a;
  }

  std::unique_ptr<Node> seq(bool icase) {
    auto s = std::make_unique<Node>();
    s->kind = Node::kSeq;
    while (err_.empty() && !eof() && peek() != '|' && peek() != ')') {
      auto a = atom(icase);
      if (!a) break;
      s->kids.push_back(quantified(std::move(a)));
    }
    return s;
  }

  std::unique_ptr<Node> set_of(Item it, bool icase, bool negated = false) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kSet;
    n->items.push_back(it);
    n->icase = icase;
    n->negated = negated;
    return n;
  }

  std::unique_ptr<Node> atom(bool icase) {
    const uint32_t c = p_[i_++];
    if (c == '(') {
      bool look = false, negative = false, inner_icase = icase;
      if (peek() == '?') {
        const uint32_t k = peek(1);
        if (k == ':') {
          i_ += 2;
        } else if (k == 'i' && peek(2) == ':') {
          i_ += 3;
          inner_icase = true;
        } else if (k == '=' || k == '!') {
          i_ += 2;
          look = true;
          negative = k == '!';
        } else {
          fail("an unsupported group '(?'");
          return nullptr;
        }
      }
      auto inner = alt(inner_icase);
      if (peek() != ')') {
        fail("a group without its ')'");
        return nullptr;
      }
      ++i_;
      if (!look) return inner;
      auto n = std::make_unique<Node>();
      n->kind = Node::kLook;
      n->look_negative = negative;
      n->kids.push_back(std::move(inner));
      return n;
    }
    if (c == '[') return cls(icase);
    if (c == '.') {
      Item it;
      it.is_pred = true;
      return set_of(it, false);
    }
    if (c == '^' || c == '$') {
      auto n = std::make_unique<Node>();
      n->kind = c == '^' ? Node::kBegin : Node::kEnd;
      return n;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      --i_;
      fail("a quantifier with nothing before it");
      return nullptr;
    }
    if (c == '\\' && peek() == 'b') {
      ++i_;
      auto n = std::make_unique<Node>();
      n->kind = Node::kWordBoundary;
      return n;
    }
    if (c == '\\') {
      Item it;
      if (!escape(it)) return nullptr;
      return set_of(it, icase);
    }
    Item it;
    it.lo = it.hi = c;
    return set_of(it, icase);
  }

  // After a backslash: one item (a predicate or a single code point).
  bool escape(Item& it) {
    if (eof()) {
      fail("a pattern ending in '\\'");
      return false;
    }
    const uint32_t c = p_[i_++];
    auto pred = [&](Pred p, bool neg) {
      it.is_pred = true;
      it.pred = p;
      it.negated = neg;
      return true;
    };
    switch (c) {
      case 's': return pred(Pred::kSpace, false);
      case 'S': return pred(Pred::kSpace, true);
      case 'd': return pred(Pred::kDigit, false);
      case 'D': return pred(Pred::kDigit, true);
      case 'w': return pred(Pred::kWord, false);
      case 'W': return pred(Pred::kWord, true);
      case 'p': case 'P': {
        if (peek() != '{') return fail("\\p without '{'"), false;
        std::string name;
        for (++i_; !eof() && peek() != '}'; ++i_) name += static_cast<char>(p_[i_]);
        if (eof()) return fail("\\p{ without '}'"), false;
        ++i_;
        Pred p;
        if (!pred_from_name(name, p)) return fail("an unsupported property \\p{" + name + "}"), false;
        return pred(p, c == 'P');
      }
      case 'r': it.lo = it.hi = '\r'; return true;
      case 'n': it.lo = it.hi = '\n'; return true;
      case 't': it.lo = it.hi = '\t'; return true;
      case 'f': it.lo = it.hi = '\f'; return true;
      case 'v': it.lo = it.hi = '\v'; return true;
      case 'u': case 'x': {
        uint32_t v = 0;
        const bool braces = peek() == '{';
        if (braces) ++i_;
        int digits = 0;
        const int want = c == 'u' ? 4 : 2;
        while (!eof() && (braces ? peek() != '}' : digits < want)) {
          const uint32_t h = p_[i_++];
          const int d = h >= '0' && h <= '9' ? int(h - '0') : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                        : h >= 'A' && h <= 'F' ? int(h - 'A' + 10) : -1;
          if (d < 0 || ++digits > 8) return fail("a bad hexadecimal escape"), false;
          v = v * 16 + static_cast<uint32_t>(d);
        }
        if (braces) {
          if (eof()) return fail("a hexadecimal escape without '}'"), false;
          ++i_;
        }
        if (digits == 0 || (!braces && digits != want) || v > 0x10FFFF) return fail("a bad hexadecimal escape"), false;
        it.lo = it.hi = v;
        return true;
      }
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
          return fail(std::string("an unsupported escape '\\") + static_cast<char>(c) + "'"), false;
        it.lo = it.hi = c;  // escaped punctuation stands for itself
        return true;
    }
  }

  std::unique_ptr<Node> cls(bool icase) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kSet;
    n->icase = icase;
    if (peek() == '^') {
      n->negated = true;
      ++i_;
    }
    bool first = true;
    while (!eof() && (peek() != ']' || first)) {
      first = false;
      Item it;
      const uint32_t c = p_[i_++];
      if (c == '\\') {
        if (!escape(it)) return nullptr;
      } else {
        it.lo = it.hi = c;
      }
      if (!it.is_pred && peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        ++i_;
        Item hi;
        const uint32_t h = p_[i_++];
        if (h == '\\') {
          if (!escape(hi)) return nullptr;
        } else {
          hi.lo = hi.hi = h;
        }
        if (hi.is_pred || hi.lo < it.lo) {
          fail("a bad range in a class");
          return nullptr;
        }
        it.hi = hi.lo;
      }
      n->items.push_back(it);
    }
    if (eof()) {
      fail("a class without its ']'");
      return nullptr;
    }
    ++i_;
    return n;
  }

  bool number(int& v) {
    if (peek() < '0' || peek() > '9') return false;
    v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<int>(p_[i_++] - '0');
      if (v > 100000) return false;
    }
    return true;
  }

  std::unique_ptr<Node> quantified(std::unique_ptr<Node> a) {
    int mn = 0, mx = -1;
    const uint32_t c = peek();
    if (c == '?') { mx = 1; ++i_; }
    else if (c == '*') { ++i_; }
    else if (c == '+') { mn = 1; ++i_; }
    else if (c == '{') {
      const size_t save = i_++;
      if (!number(mn)) { i_ = save; return a; }  // a literal '{' (regex does the same)
      if (peek() == ',') {
        ++i_;
        if (!number(mx)) mx = -1;
      } else {
        mx = mn;
      }
      if (peek() != '}' || (mx >= 0 && mx < mn)) {
        fail("a bad {n,m} quantifier");
        return a;
      }
      ++i_;
    } else {
      return a;
    }
    if (a->kind == Node::kBegin || a->kind == Node::kEnd || a->kind == Node::kLook || a->kind == Node::kWordBoundary) {
      fail("a quantifier on an anchor or a lookahead");
      return a;
    }
    auto r = std::make_unique<Node>();
    r->kind = Node::kRepeat;
    r->min = mn;
    r->max = mx;
    if (peek() == '?') { r->mode = Node::kLazy; ++i_; }
    else if (peek() == '+') { r->mode = Node::kPossessive; ++i_; }
    r->kids.push_back(std::move(a));
    return r;
  }

  std::string_view pat_;
  std::vector<uint32_t> p_;
  size_t i_ = 0;
  std::string err_;
};

struct Ctx {
  const uint32_t* c;
  size_t begin, end;
};

class Matcher {
 public:
  explicit Matcher(const Ctx& x) : x_(x) {}

  using Fn = std::function<bool(size_t)>;

  // Whether n matches at pos with k accepting where it ends (continuations
  // are type-erased: templates over them would nest without end through
  // lookaheads and repeats).
  bool match(const Node& n, size_t pos, const Fn& k) const {
    switch (n.kind) {
      case Node::kSet:
        return pos < x_.end && n.set_has(x_.c[pos]) && k(pos + 1);
      case Node::kSeq:
        return seq(n, 0, pos, k);
      case Node::kAlt:
        for (const auto& kid : n.kids)
          if (match(*kid, pos, k)) return true;
        return false;
      case Node::kRepeat:
        return repeat(n, pos, k);
      case Node::kLook: {
        const bool found = match(*n.kids[0], pos, Fn([](size_t) { return true; }));
        return found != n.look_negative && k(pos);
      }
      case Node::kBegin:
        return pos == x_.begin && k(pos);
      case Node::kEnd:
        return pos == x_.end && k(pos);
      case Node::kWordBoundary: {
        const bool before = pos > x_.begin && pred_has(Pred::kWord, x_.c[pos - 1]);
        const bool after = pos < x_.end && pred_has(Pred::kWord, x_.c[pos]);
        return before != after && k(pos);
      }
    }
    return false;
  }

 private:
  bool seq(const Node& n, size_t i, size_t pos, const Fn& k) const {
    if (i == n.kids.size()) return k(pos);
    return match(*n.kids[i], pos, Fn([&](size_t e) { return seq(n, i + 1, e, k); }));
  }

  bool repeat(const Node& n, size_t pos, const Fn& k) const {
    const Node& kid = *n.kids[0];
    const size_t mx = n.max < 0 ? SIZE_MAX : static_cast<size_t>(n.max), mn = static_cast<size_t>(n.min);
    if (kid.kind == Node::kSet) {  // one code point per step: count the run, then try lengths
      size_t r = 0;
      while (r < mx && pos + r < x_.end && kid.set_has(x_.c[pos + r])) ++r;
      if (r < mn) return false;
      switch (n.mode) {
        case Node::kGreedy:
          for (size_t i = r + 1; i-- > mn;)
            if (k(pos + i)) return true;
          return false;
        case Node::kLazy:
          for (size_t i = mn; i <= r; ++i)
            if (k(pos + i)) return true;
          return false;
        case Node::kPossessive:
          return k(pos + r);
      }
    }
    // Any other repeat: each step takes the kid's preferred match (its first
    // success), and the count backtracks (greedy: most steps first). Full
    // backtracking would also revisit the choices inside each step; for the
    // pre-tokenizer patterns, whose repeated groups end their alternative or
    // have one width, the first success is the one that stands (the tests
    // check every pattern against `regex`). Iterative, so the stack does not
    // grow with the text: a recursive step per repetition overflowed it on
    // a 100,000-word line.
    std::vector<size_t> ends = {pos};
    while (ends.size() - 1 < mx) {
      const size_t at = ends.back();
      size_t e = SIZE_MAX;
      if (!match(kid, at, Fn([&](size_t end) { e = end; return true; })) || e == at) break;  // an empty step ends it
      ends.push_back(e);
    }
    const size_t got = ends.size() - 1;
    if (got < mn) return false;
    switch (n.mode) {
      case Node::kGreedy:
        for (size_t i = got + 1; i-- > mn;)
          if (k(ends[i])) return true;
        return false;
      case Node::kLazy:
        for (size_t i = mn; i <= got; ++i)
          if (k(ends[i])) return true;
        return false;
      case Node::kPossessive:
        return k(ends[got]);
    }
    return false;
  }

  Ctx x_;
};

}  // namespace

bool regex_digit(uint32_t c) { return pred_has(Pred::kDigit, c); }
bool regex_word_char(uint32_t c) { return pred_has(Pred::kWord, c); }

CptRegex::CptRegex() = default;
CptRegex::CptRegex(CptRegex&&) noexcept = default;
CptRegex& CptRegex::operator=(CptRegex&&) noexcept = default;
CptRegex::~CptRegex() = default;

Expected<CptRegex> CptRegex::compile(std::string_view pattern) {
  Parser p(pattern);
  auto root = p.parse();
  if (!root) return root.status();
  CptRegex r;
  r.root_ = std::move(*root);
  return r;
}

size_t CptRegex::match_at(const uint32_t* c, size_t begin, size_t end, size_t p) const {
  size_t result = kNoMatch;
  Matcher m({c, begin, end});
  m.match(*root_, p, Matcher::Fn([&](size_t e) {
    if (e == p) return false;
    result = e;
    return true;
  }));
  return result;
}

}  // namespace tkv
