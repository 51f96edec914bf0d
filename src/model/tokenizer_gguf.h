// The tokenizer of a GGUF file: its tokenizer.ggml.* keys read into a
// text::Vocabulary (text/ knows no file format), then built by the tokenizer.
#pragma once
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "util/status.h"

namespace tkv {

// Errors name the file and the key (missing, wrong type, wrong count).
Expected<Vocabulary> vocabulary_from_gguf(const gguf::File& f);
Expected<Tokenizer> tokenizer_from_gguf(const gguf::File& f);

}  // namespace tkv
