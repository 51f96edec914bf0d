// Byte-level BPE pre-tokenizers: the splitting rules that tokenizer.ggml.pre
// names. GPT-2, Llama 3, Qwen2, StarCoder, Falcon and DeepSeek LLM are
// hand-written over Unicode code points (categories from ICU), as llama.cpp's
// unicode.cpp does; the others are their published regexes, applied in turn
// by CptRegex (cpt_regex.h). pretokenize.cpp's table lists every name.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tkv {

enum class PreTokenizer {
  kGpt2, kLlama3, kQwen2, kStarcoder, kFalcon, kDeepseekLlm,  // hand-written
  kDeepseekCoder, kDeepseekV3, kSpark2_5, kYoutu, kGpt4o, kTekken, kQwen35, kKimiK2, kSeedCoder, kBailingMoe,
  kUfakzeka, kExaoneMoe, kMinicpm5, kLaguna, kJais2, kBloom, kViking, kChameleon, kTinyAya, kDefault,  // regexes
};

// Maps tokenizer.ggml.pre to a pre-tokenizer; false if unknown.
// ignore_merges: whether llama.cpp emits a pre-token that is itself in the
// vocabulary as that token without merging (set per name: Llama 3, Tekken,
// Youtu, MiniCPM 5).
bool pre_tokenizer_from_name(std::string_view name, PreTokenizer& out, bool* ignore_merges = nullptr);
// Every name pre_tokenizer_from_name knows, comma-separated (for errors).
std::string pre_tokenizer_names();
// The regexes a regex-based kind applies in turn (empty for hand-written ones).
const std::vector<std::string>& pre_tokenizer_regexes(PreTokenizer kind);

// Splits UTF-8 text into the pieces BPE merges within.
std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer kind);

// UTF-8 helpers shared with the tokenizers.
std::vector<uint32_t> utf8_to_cpts(std::string_view s);
std::string cpt_to_utf8(uint32_t c);

}  // namespace tkv
