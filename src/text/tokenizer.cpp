#include "text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <queue>

namespace tkv {
namespace {

size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xe) return 3;
  if ((c >> 3) == 0x1e) return 4;
  return 1;  // invalid lead byte: one byte, handled by byte fallback
}

const std::string kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// Pair merging over the UTF-8 characters of `text`, as both of llama.cpp's
// SPM and BPE sessions do: repeatedly merge the adjacent pair with the highest
// priority (ties: leftmost). `priority(left, right, &p)` returns false when
// the pair may not merge. Returns the final pieces in order.
template <class Priority>
std::vector<std::string_view> merge_pairs(const std::string& text, Priority priority) {
  struct Sym { int prev, next; size_t pos, n; };
  std::vector<Sym> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
    sym.push_back({static_cast<int>(sym.size()) - 1, static_cast<int>(sym.size()) + 1, i, len});
    i += len;
  }
  std::vector<std::string_view> out;
  if (sym.empty()) return out;
  sym.back().next = -1;
  struct Bigram { int left, right; double prio; size_t size; };
  auto cmp = [](const Bigram& a, const Bigram& b) { return a.prio < b.prio || (a.prio == b.prio && a.left > b.left); };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
  auto view = [&](int i) { return std::string_view(text.data() + sym[i].pos, sym[i].n); };
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    double p;
    if (priority(view(l), view(r), &p)) queue.push({l, r, p, sym[l].n + sym[r].n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = sym[b.left];
    Sym& r = sym[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale: a side merged since
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i != -1; i = sym[i].next) out.push_back(view(i));
  return out;
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_vocabulary(Vocabulary v) {
  Tokenizer t;
  const std::string& src = v.source;
  if (v.model != "llama" && v.model != "gpt2")
    return Status::Error(src + ": tokenizer model '" + v.model + "' is not supported (llama, gpt2)");
  t.bpe_ = v.model == "gpt2";
  if (t.bpe_) {
    if (!pre_tokenizer_from_name(v.pre, t.pre_, &t.ignore_merges_))
      return Status::Error(src + ": pre-tokenizer '" + v.pre + "' (tokenizer.ggml.pre) is not supported; supported: " +
                           pre_tokenizer_names());
    for (size_t i = 0; i < v.merges.size(); ++i) t.merge_rank_.emplace(std::move(v.merges[i]), static_cast<int32_t>(i));
    // GPT-2's reversible byte -> printable code point map.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      t.byte_to_cpt_[b] = cpt_to_utf8(cp);
      t.cpt_to_byte_[cp] = static_cast<uint8_t>(b);
    }
    t.add_space_prefix_ = false;
    t.add_bos_ = false;
  }
  if (v.tokens.empty()) return Status::Error(src + ": tokenizer.ggml.tokens is missing or not an array of strings");
  if (v.tokens.size() > uint64_t(kMaxVocab))
    return Status::Error(src + ": tokenizer.ggml.tokens has " + std::to_string(v.tokens.size()) +
                         " tokens, more than the " + std::to_string(kMaxVocab) + " supported");
  const size_t n = v.tokens.size();
  if (!v.scores.empty() && v.scores.size() != n)
    return Status::Error(src + ": tokenizer.ggml.scores must be a numeric array of " + std::to_string(n));
  if (!v.types.empty() && v.types.size() != n)
    return Status::Error(src + ": tokenizer.ggml.token_type must be a numeric array of " + std::to_string(n));
  t.tokens_ = std::move(v.tokens);
  t.scores_ = v.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(v.scores);
  t.types_ = v.types.empty() ? std::vector<int32_t>(n, kNormal) : std::move(v.types);
  for (size_t i = 0; i < n; ++i) t.index_.emplace(t.tokens_[i], static_cast<int32_t>(i));
  auto id_or = [&](const char* key, const std::optional<uint64_t>& id, int64_t fallback) -> Expected<int32_t> {
    if (!id) return static_cast<int32_t>(fallback);
    if (*id >= n) return Status::Error(src + ": " + key + " = " + std::to_string(*id) + " is not a token id");
    return static_cast<int32_t>(*id);
  };
  // SentencePiece vocabularies default to <unk>=0, <s>=1, </s>=2; BPE ones name theirs.
  auto bos = id_or("tokenizer.ggml.bos_token_id", v.bos, t.bpe_ ? -1 : 1);
  auto eos = id_or("tokenizer.ggml.eos_token_id", v.eos, t.bpe_ ? -1 : 2);
  auto unk = id_or("tokenizer.ggml.unknown_token_id", v.unk, t.bpe_ ? -1 : 0);
  if (!bos) return bos.status();
  if (!eos) return eos.status();
  if (!unk) return unk.status();
  t.bos_ = *bos;
  t.eos_ = *eos;
  t.unk_ = *unk;
  if (v.add_bos) t.add_bos_ = *v.add_bos;
  if (v.add_space_prefix) t.add_space_prefix_ = *v.add_space_prefix;
  if (v.add_eos) t.add_eos_ = *v.add_eos;
  if (t.add_eos_ && t.eos_ < 0) return Status::Error(src + ": tokenizer.ggml.add_eos_token without an EOS token id");
  if (t.add_bos_ && t.bos_ < 0 && v.add_bos)
    return Status::Error(src + ": tokenizer.ggml.add_bos_token without a BOS token id");
  // llama.cpp strips the whitespace after every special token of a Phi-3
  // vocabulary (its tokens carry rstrip), recognised by the model's name.
  std::string name = v.general_name;
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  t.rstrip_after_special_ = !t.bpe_ && (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const int32_t id = t.find(name);
    t.byte_tokens_[b] = id >= 0 ? id : std::max(t.unk_, 0);
  }
  for (size_t i = 0; i < n; ++i)
    if ((t.types_[i] == kControl || t.types_[i] == kUserDefined) && !t.tokens_[i].empty())
      t.specials_.push_back(static_cast<int32_t>(i));
  std::stable_sort(t.specials_.begin(), t.specials_.end(),
                   [&](int32_t a, int32_t b) { return t.tokens_[a].size() > t.tokens_[b].size(); });
  return t;
}

int32_t Tokenizer::find(std::string_view s) const {
  auto it = index_.find(std::string(s));
  return it == index_.end() ? -1 : it->second;
}

// llama.cpp's SPM session: symbols are UTF-8 characters; repeatedly merge the
// adjacent pair whose concatenation is a token with the highest score (ties:
// leftmost); leftover symbols that are not tokens become byte tokens.
void Tokenizer::encode_spm(std::string text, std::vector<int32_t>& out) const {
  std::string esc;
  esc.reserve(text.size() * 2);
  for (char c : text) {
    if (c == ' ') esc += kSpace;
    else esc += c;
  }
  // Pieces merge while their concatenation is a token; higher score first.
  const auto pieces = merge_pairs(esc, [&](std::string_view l, std::string_view r, double* p) {
    const int32_t id = find(std::string_view(l.data(), l.size() + r.size()));  // l and r are adjacent in esc
    if (id < 0) return false;
    *p = scores_[id];
    return true;
  });
  for (std::string_view s : pieces) {
    const int32_t id = find(s);
    if (id >= 0) {
      out.push_back(id);
    } else {
      for (unsigned char c : s) out.push_back(byte_tokens_[c]);
    }
  }
}

// llama.cpp's BPE session: per pre-tokenized word, bytes mapped to GPT-2's
// printable code points, then merges applied lowest rank first (ties:
// leftmost); leftovers that are not tokens are looked up byte by byte.
void Tokenizer::encode_bpe(const std::string& text, std::vector<int32_t>& out) const {
  for (const std::string& word : pre_tokenize(text, pre_)) {
    std::string mapped;
    for (unsigned char b : word) mapped += byte_to_cpt_[b];
    if (ignore_merges_) {  // a whole pre-token that is a token is that token
      const int32_t id = find(mapped);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    // Pieces merge by the merge list: lower rank first.
    std::string key;
    const auto pieces = merge_pairs(mapped, [&](std::string_view l, std::string_view r, double* p) {
      key.assign(l);
      key += ' ';
      key.append(r);
      auto it = merge_rank_.find(key);
      if (it == merge_rank_.end()) return false;
      *p = -static_cast<double>(it->second);
      return true;
    });
    for (std::string_view s : pieces) {
      const int32_t id = find(s);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (size_t k = 0; k < s.size();) {  // per character of the mapped text
        const size_t len = std::min(utf8_len(static_cast<unsigned char>(s[k])), s.size() - k);
        const int32_t cid = find(s.substr(k, len));
        if (cid >= 0) out.push_back(cid);
        k += len;
      }
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  // Split out special tokens: user-defined ones always, control ones only
  // when asked (llama.cpp's rule).
  std::vector<std::pair<std::string, int32_t>> parts;  // text fragment or token (id >= 0)
  std::string rest(text);
  size_t start = 0;
  while (start < rest.size()) {
    size_t best = std::string::npos;
    int32_t best_id = -1;
    for (int32_t id : specials_) {
      if (types_[id] == kControl && !parse_special) continue;
      const size_t p = rest.find(tokens_[id], start);
      if (p != std::string::npos && (p < best || (p == best && tokens_[id].size() > tokens_[best_id].size()))) {
        best = p;
        best_id = id;
      }
    }
    if (best_id < 0) break;
    if (best > start) parts.push_back({rest.substr(start, best - start), -1});
    parts.push_back({"", best_id});
    start = best + tokens_[best_id].size();
  }
  if (start < rest.size()) parts.push_back({rest.substr(start), -1});
  bool prev_special = true;  // the space prefix goes before the first text and after specials
  for (auto& [frag, id] : parts) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
      continue;
    }
    if (rstrip_after_special_ && prev_special && &frag != &parts[0].first) {
      size_t k = 0;
      while (k < frag.size() && std::isspace(static_cast<unsigned char>(frag[k]))) ++k;
      frag.erase(0, k);
      if (frag.empty()) continue;
    }
    if (bpe_) encode_bpe(frag, out);
    else encode_spm(add_space_prefix_ && prev_special ? " " + frag : frag, out);
    prev_special = false;
  }
  if (add_bos && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return "";
  const int32_t ty = types_[id];
  if (ty == kControl || ty == kUnknown || ty == kUnused) return "";
  const std::string& s = tokens_[id];
  if (bpe_) {  // undo GPT-2's byte -> code point map
    if (ty == kUserDefined) return s;
    std::string out;
    for (uint32_t cp : utf8_to_cpts(s)) {
      auto it = cpt_to_byte_.find(cp);
      if (it != cpt_to_byte_.end()) out += static_cast<char>(it->second);
      else out += cpt_to_utf8(cp);
    }
    return out;
  }
  if (ty == kByte && s.size() == 6 && s.rfind("<0x", 0) == 0) {
    return std::string(1, static_cast<char>(std::stoi(s.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, kSpace) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool first_text = true;
  for (int32_t id : ids) {
    std::string p = piece(id);
    if (p.empty()) continue;
    if (first_text && add_space_prefix_ && p[0] == ' ') p.erase(0, 1);
    first_text = false;
    out += p;
  }
  return out;
}

}  // namespace tkv
