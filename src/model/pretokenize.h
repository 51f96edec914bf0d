// Byte-level BPE pre-tokenizers: llama.cpp's splitting rules for the regexes
// of GPT-2, Llama 3, Qwen2, StarCoder, Falcon and DeepSeek LLM, hand-written over Unicode
// code points (categories from ICU), as llama.cpp's unicode.cpp does.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tkv {

enum class PreTokenizer { kGpt2, kLlama3, kQwen2, kStarcoder, kFalcon, kDeepseekLlm };

// Maps tokenizer.ggml.pre to a pre-tokenizer; false if unknown.
bool pre_tokenizer_from_name(std::string_view name, PreTokenizer& out);

// Splits UTF-8 text into the pieces BPE merges within.
std::vector<std::string> pre_tokenize(std::string_view text, PreTokenizer kind);

// UTF-8 helpers shared with the tokenizers.
std::vector<uint32_t> utf8_to_cpts(std::string_view s);
std::string cpt_to_utf8(uint32_t c);

}  // namespace tkv
