// text/: everything that turns bytes into tokens and tokens into text —
// tokenizers, pre-tokenizers, their regex matcher, streamed text, chat templates.
// It sees util/ only: no file format (model/ reads the vocabulary from GGUF).
//
// Tokenizers built from a vocabulary: SentencePiece-style ("llama": scores,
// token types, byte fallback) and byte-level BPE ("gpt2": merges and the
// pre-tokenizer named by tokenizer.ggml.pre), both following llama.cpp's merge
// order exactly.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/pretokenize.h"
#include "util/status.h"

namespace tkv {

// Vocabularies larger than this are refused before any table is sized by
// them (the largest in use hold ~262K tokens).
constexpr int64_t kMaxVocab = int64_t(1) << 24;

// A vocabulary as a model file states it (GGUF's tokenizer.ggml.* keys; the
// reader is model/tokenizer_gguf.h). Values are as written: ids are checked
// against the vocabulary by Tokenizer::from_vocabulary.
struct Vocabulary {
  std::string source;                  // the file, for error messages
  std::string model;                   // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre = "default";         // tokenizer.ggml.pre (gpt2)
  std::vector<std::string> merges;     // tokenizer.ggml.merges (gpt2), "left right" in rank order
  std::vector<std::string> tokens;     // tokenizer.ggml.tokens
  std::vector<float> scores;           // empty: every score 0
  std::vector<int32_t> types;          // empty: every token kNormal
  std::optional<uint64_t> bos, eos, unk;                 // absent: the model kind's default
  std::optional<bool> add_bos, add_space_prefix, add_eos;
  std::string general_name;            // general.name (llama.cpp keys a Phi-3 rule on it)
};

class Tokenizer {
 public:
  enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

  // Errors name the source and the key at fault.
  static Expected<Tokenizer> from_vocabulary(Vocabulary v);

  // add_bos: prepend BOS when the vocabulary asks for it; parse_special: turn
  // control-token text (e.g. "<s>") in the input into those tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special = false) const;
  // Text of the ids; control tokens are dropped, byte tokens become bytes, the
  // space prefix added by encode is removed from the start.
  std::string decode(const std::vector<int32_t>& ids) const;
  // One token's raw bytes (for streaming; may be part of a UTF-8 character).
  std::string piece(int32_t id) const;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool is_control(int32_t id) const { return types_[id] == kControl; }

 private:
  void encode_spm(std::string text, std::vector<int32_t>& out) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>& out) const;
  bool bpe_ = false;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  bool ignore_merges_ = false;  // llama.cpp's, per tokenizer.ggml.pre name
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  std::string byte_to_cpt_[256];                         // GPT-2 byte -> UTF-8 of its stand-in
  std::unordered_map<uint32_t, uint8_t> cpt_to_byte_;
  int32_t find(std::string_view s) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> index_;
  std::vector<int32_t> specials_;  // user-defined and control tokens, longest first
  int32_t byte_tokens_[256];
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true, add_space_prefix_ = true;
  bool add_eos_ = false;              // tokenizer.ggml.add_eos_token: EOS after the text
  bool rstrip_after_special_ = false; // Phi-3 (llama.cpp, by general.name): whitespace after a special token dropped
};

}  // namespace tkv
