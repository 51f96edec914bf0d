#include "model/tokenizer_gguf.h"

namespace tkv {

Expected<Vocabulary> vocabulary_from_gguf(const gguf::File& f) {
  Vocabulary v;
  v.source = f.path();
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return model.status();
  v.model = *model;
  if (v.model == "gpt2") {
    v.pre = f.get_string_or("tokenizer.ggml.pre", "default");
    const gguf::Value* merges = f.find("tokenizer.ggml.merges");
    if (!merges || merges->type != gguf::Type::kArray || merges->elem != gguf::Type::kString)
      return Status::Error(f.path() + ": a gpt2 tokenizer needs tokenizer.ggml.merges (array of strings)");
    v.merges.reserve(merges->strings.size());
    for (auto s : merges->strings) v.merges.emplace_back(s);
  }
  const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
  if (!toks || toks->type != gguf::Type::kArray || toks->elem != gguf::Type::kString || toks->count == 0)
    return Status::Error(f.path() + ": tokenizer.ggml.tokens is missing or not an array of strings");
  if (toks->count > uint64_t(kMaxVocab))  // before anything is sized by it
    return Status::Error(f.path() + ": tokenizer.ggml.tokens has " + std::to_string(toks->count) +
                         " tokens, more than the " + std::to_string(kMaxVocab) + " supported");
  const size_t n = toks->count;
  v.tokens.reserve(n);
  for (auto s : toks->strings) v.tokens.emplace_back(s);
  if (const gguf::Value* sc = f.find("tokenizer.ggml.scores")) {
    if (sc->type != gguf::Type::kArray || !sc->raw || sc->count != n)
      return Status::Error(f.path() + ": tokenizer.ggml.scores must be a numeric array of " + std::to_string(n));
    v.scores.resize(n);
    for (size_t i = 0; i < n; ++i) v.scores[i] = static_cast<float>(sc->num(i));
  }
  if (const gguf::Value* ty = f.find("tokenizer.ggml.token_type")) {
    if (ty->type != gguf::Type::kArray || !ty->raw || ty->count != n)
      return Status::Error(f.path() + ": tokenizer.ggml.token_type must be a numeric array of " + std::to_string(n));
    v.types.resize(n);
    for (size_t i = 0; i < n; ++i) v.types[i] = static_cast<int32_t>(ty->inum(i));
  }
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &v.bos}, std::pair{"tokenizer.ggml.eos_token_id", &v.eos},
                         std::pair{"tokenizer.ggml.unknown_token_id", &v.unk}}) {
    if (!f.find(key)) continue;
    auto u = f.get_uint(key);
    if (!u) return u.status();
    *id = *u;
  }
  if (const gguf::Value* b = f.find("tokenizer.ggml.add_bos_token")) v.add_bos = b->u != 0;
  if (const gguf::Value* b = f.find("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = b->u != 0;
  if (const gguf::Value* b = f.find("tokenizer.ggml.add_eos_token")) v.add_eos = b->u != 0;
  v.general_name = f.get_string_or("general.name", "");
  return v;
}

Expected<Tokenizer> tokenizer_from_gguf(const gguf::File& f) {
  auto v = vocabulary_from_gguf(f);
  if (!v) return v.status();
  return Tokenizer::from_vocabulary(std::move(*v));
}

}  // namespace tkv
