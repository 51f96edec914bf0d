// Needle in a haystack: a sentence with a random 7-digit number is placed at
// a given depth of haystack text cut to the context, the model is asked for
// the number, and the answer is scored by exact recovery.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

enum class NiahScore { kFound, kNotFound, kExtraDigits, kWrongNumber };
const char* niah_score_name(NiahScore s);

// Scores an answer: the first run of digits must be exactly the number.
NiahScore niah_score(const std::string& answer, const std::string& number);

// The needle's number for (seed, context, depth, trial): 7 digits, reproducible.
std::string niah_number(uint64_t seed, int context, int depth, int trial);

// Token layout of one prompt: prefix (chat template start), haystack[0, at),
// needle, haystack[at, n), question, suffix. `at` is the haystack token
// index closest to depth% of the haystack length that follows a sentence end.
struct NiahPrompt {
  std::vector<int32_t> tokens;
  size_t needle_begin = 0, needle_end = 0;  // where the needle sits in tokens
  size_t haystack_tokens = 0;
};
NiahPrompt niah_build(const Tokenizer& tok, const std::vector<int32_t>& haystack, const std::string& needle,
                      const std::string& question, const std::string& chat_template, int context, int depth_pct);

struct NiahOptions {
  std::vector<int> contexts{1024, 2048};
  std::vector<int> depths{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  int trials = 1;
  uint64_t seed = 1;
  int threads = 2;
  KvCacheOptions cache;
};

struct NiahCell {
  int context, depth, trial;
  std::string number, answer;
  NiahScore score;
};

// Runs the whole grid on `haystack_text`; progress(i, n) after each cell.
Expected<std::vector<NiahCell>> niah_run(const Model& model, const std::string& haystack_text, const NiahOptions& o,
                                         const std::function<void(int, int)>& progress = {});

// An SVG heat map (depth rows x context columns, share of trials found).
std::string niah_svg(const std::vector<NiahCell>& cells, const std::string& title);

}  // namespace tkv
