#include "eval/niah.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "util/rng.h"
#include "util/xml_text.h"

namespace tkv {

const char* niah_score_name(NiahScore s) {
  switch (s) {
    case NiahScore::kFound: return "found";
    case NiahScore::kNotFound: return "not found";
    case NiahScore::kExtraDigits: return "extra digits";
    case NiahScore::kWrongNumber: return "wrong number";
  }
  return "?";
}

NiahScore niah_score(const std::string& answer, const std::string& number) {
  size_t i = 0;
  while (i < answer.size() && !(answer[i] >= '0' && answer[i] <= '9')) ++i;
  if (i == answer.size()) return NiahScore::kNotFound;
  size_t j = i;
  while (j < answer.size() && answer[j] >= '0' && answer[j] <= '9') ++j;
  const std::string digits = answer.substr(i, j - i);
  if (digits == number) return NiahScore::kFound;
  if (digits.find(number) != std::string::npos) return NiahScore::kExtraDigits;
  return NiahScore::kWrongNumber;
}

std::string niah_number(uint64_t seed, int context, int depth, int trial) {
  Rng r(seed * 1000003u + static_cast<uint64_t>(context) * 131u + static_cast<uint64_t>(depth) * 7u + trial);
  return std::to_string(1000000 + r.below(9000000));
}

namespace {

// The chat template families we can apply without a Jinja engine.
void chat_wrap(const std::string& tpl, std::string& prefix, std::string& suffix) {
  if (tpl.find("<|im_start|>") != std::string::npos) {
    prefix = "<|im_start|>user\n";
    suffix = "<|im_end|>\n<|im_start|>assistant\n";
  } else if (tpl.find("<|start_header_id|>") != std::string::npos) {
    prefix = "<|start_header_id|>user<|end_header_id|>\n\n";
    suffix = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  } else if (tpl.find("<|user|>") != std::string::npos) {
    prefix = "<|user|>\n";
    suffix = "<|end|>\n<|assistant|>\n";
  } else if (tpl.find("[INST]") != std::string::npos) {
    prefix = "[INST] ";
    suffix = " [/INST]";
  }
}

}  // namespace

NiahPrompt niah_build(const Tokenizer& tok, const std::vector<int32_t>& haystack, const std::string& needle,
                      const std::string& question, const std::string& chat_template, int context, int depth_pct) {
  std::string prefix, suffix;
  chat_wrap(chat_template, prefix, suffix);
  NiahPrompt p;
  std::vector<int32_t> head = tok.encode(prefix, true, true);
  const std::vector<int32_t> nt = tok.encode(" " + needle, false);
  const std::vector<int32_t> qt = tok.encode("\n" + question + suffix, false, true);
  const int budget = context - static_cast<int>(head.size() + nt.size() + qt.size()) - 16;  // 16 to answer
  const size_t n = static_cast<size_t>(std::max(0, std::min<int>(budget, static_cast<int>(haystack.size()))));
  size_t at = static_cast<size_t>(static_cast<double>(n) * depth_pct / 100.0 + 0.5);
  // Move forward to just after a sentence end, so the needle is its own sentence.
  for (size_t k = at; k < n && k < at + 64; ++k) {
    const std::string piece = tok.piece(haystack[k > 0 ? k - 1 : 0]);
    if (k == 0 || (!piece.empty() && (piece.back() == '.' || piece.back() == '\n'))) {
      at = k;
      break;
    }
  }
  at = std::min(at, n);
  p.tokens = head;
  p.tokens.insert(p.tokens.end(), haystack.begin(), haystack.begin() + at);
  p.needle_begin = p.tokens.size();
  p.tokens.insert(p.tokens.end(), nt.begin(), nt.end());
  p.needle_end = p.tokens.size();
  p.tokens.insert(p.tokens.end(), haystack.begin() + at, haystack.begin() + n);
  p.tokens.insert(p.tokens.end(), qt.begin(), qt.end());
  p.haystack_tokens = n;
  return p;
}

Expected<std::vector<NiahCell>> niah_run(const Model& model, const std::string& haystack_text, const NiahOptions& o,
                                         const std::function<void(int, int)>& progress) {
  const ModelConfig& c = model.config();
  const Tokenizer& tok = model.tokenizer();
  const std::vector<int32_t> hay = tok.encode(haystack_text, false);
  const std::string tpl = model.file().get_string_or("tokenizer.chat_template", "");
  std::vector<NiahCell> cells;
  const int total = static_cast<int>(o.contexts.size() * o.depths.size()) * o.trials;
  for (int ctx : o.contexts)
    for (int depth : o.depths)
      for (int trial = 0; trial < o.trials; ++trial) {
        if (depth < 0 || depth > 100) return Status::Error("niah: depth " + std::to_string(depth) + " is not in 0..100");
        const std::string number = niah_number(o.seed, ctx, depth, trial);
        const NiahPrompt p = niah_build(tok, hay, "The special magic number is " + number + ".",
                                        "What is the special magic number mentioned in the text above? The special magic number is",
                                        tpl, ctx, depth);
        if (p.haystack_tokens == 0) return Status::Error("niah: context " + std::to_string(ctx) + " leaves no room for haystack");
        KvCacheOptions co = o.cache;
        co.capacity = static_cast<int>(p.tokens.size()) + 16;
        auto cache = KvCache::create(c.kv_shape(), co);
        if (!cache) return cache.status();
        std::vector<float> logits(c.n_vocab);
        for (size_t b0 = 0; b0 < p.tokens.size(); b0 += 512) {
          const int nb = static_cast<int>(std::min<size_t>(512, p.tokens.size() - b0));
          Status s = model.forward(&p.tokens[b0], nb, static_cast<int>(b0), **cache, o.threads, logits.data());
          if (!s.ok()) return s;
        }
        std::vector<int32_t> out;
        int pos = static_cast<int>(p.tokens.size());
        for (int i = 0; i < 12; ++i) {
          const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
          if (next == tok.eos()) break;
          out.push_back(next);
          Status s = model.forward(&next, 1, pos++, **cache, o.threads, logits.data());
          if (!s.ok()) return s;
        }
        const std::string answer = tok.decode(out);
        cells.push_back({ctx, depth, trial, number, answer, niah_score(answer, number)});
        if (progress) progress(static_cast<int>(cells.size()), total);
      }
  return cells;
}

std::string niah_svg(const std::vector<NiahCell>& cells, const std::string& title) {
  std::set<int> ctxs, depths;
  std::map<std::pair<int, int>, std::pair<int, int>> found;  // (depth, ctx) -> (found, trials)
  for (const auto& c : cells) {
    ctxs.insert(c.context);
    depths.insert(c.depth);
    auto& f = found[{c.depth, c.context}];
    f.first += c.score == NiahScore::kFound;
    f.second += 1;
  }
  const int cw = 70, ch = 26, left = 70, top = 50;
  const int w = std::max(420, left + cw * static_cast<int>(ctxs.size()) + 20);
  const int h = top + ch * static_cast<int>(depths.size()) + 40;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << xml_escape(title) << "</text>\n";
  s << "<text x=\"8\" y=\"" << top - 8 << "\">depth %</text>\n";
  int col = 0;
  for (int cx : ctxs) s << "<text x=\"" << left + col++ * cw + 8 << "\" y=\"" << top - 8 << "\">" << cx << "</text>\n";
  int row = 0;
  for (int d : depths) {
    s << "<text x=\"8\" y=\"" << top + row * ch + 17 << "\">" << d << "</text>\n";
    col = 0;
    for (int cx : ctxs) {
      const auto f = found[{d, cx}];
      const double r = f.second ? double(f.first) / f.second : 0.0;
      const int red = static_cast<int>(220 * (1 - r) + 30), green = static_cast<int>(190 * r + 40);
      s << "<rect x=\"" << left + col * cw << "\" y=\"" << top + row * ch << "\" width=\"" << cw - 2 << "\" height=\""
        << ch - 2 << "\" fill=\"rgb(" << red << "," << green << ",60)\"><title>depth " << d << "%, context " << cx << ": "
        << f.first << "/" << f.second << " found</title></rect>\n";
      s << "<text x=\"" << left + col * cw + 20 << "\" y=\"" << top + row * ch + 17 << "\" fill=\"white\">" << f.first
        << "/" << f.second << "</text>\n";
      ++col;
    }
    ++row;
  }
  s << "<text x=\"" << left << "\" y=\"" << h - 12 << "\">context (tokens); cell: needles found / trials</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace tkv
