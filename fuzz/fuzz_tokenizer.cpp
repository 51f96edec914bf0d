// libFuzzer harness for the tokenizers (text/tokenizer.h, pretokenize.h):
// arbitrary bytes encoded (with and without special-token parsing) and
// decoded again on each vocabulary of ../shared/data/tokenizer (SentencePiece
// and byte-level BPE with their pre-tokenizers), and arbitrary token ids
// decoded and streamed piece by piece; and the text through every
// pre-tokenizer kind (their pieces must put the text back together). Input:
// byte 0 picks the vocabulary, byte 1 the flags (bits 2-7 the kind), the rest
// is the text (and, read as int32, the ids).
// Seeds in fuzz/corpus/tokenizer/: lines of the suites' inputs.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "text/pretokenize.h"
#include "model/tokenizer_gguf.h"
#include "text/tokenizer.h"

namespace {

// Every ggml-vocab-*.gguf of the suites that turbokv supports; a vocabulary
// whose pre-tokenizer turbokv lacks is named once and left out (the tokenizer
// tests list which). Anything else failing stops the harness: one that
// silently fuzzed nothing would pass.
const std::vector<tkv::Tokenizer>& vocabularies() {
  static const std::vector<tkv::Tokenizer> v = [] {
    std::vector<tkv::Tokenizer> out;
    const std::string dir = std::string(TKV_SHARED_DIR) + "/data/tokenizer";
    std::vector<std::string> paths;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string p = e.path().string();
      if (p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0) paths.push_back(p);
    }
    std::sort(paths.begin(), paths.end());
    for (const auto& path : paths) {
      auto f = tkv::gguf::File::open(path);
      auto t = f ? tkv::tokenizer_from_gguf(**f) : tkv::Expected<tkv::Tokenizer>(f.status());
      if (!t && t.status().message().find("is not supported") != std::string::npos) {
        std::fprintf(stderr, "fuzz_tokenizer: left out: %s\n", t.status().message().c_str());
        continue;
      }
      if (!t) {
        std::fprintf(stderr, "fuzz_tokenizer: %s\n", t.status().message().c_str());
        std::abort();
      }
      out.push_back(std::move(*t));
    }
    if (out.empty()) {  // without ../shared this harness has nothing to fuzz: fatal only where the data is required
      std::fprintf(stderr, "fuzz_tokenizer: no vocabulary in %s\n", dir.c_str());
      const char* ci = std::getenv("CI");
      const char* req = std::getenv("TKV_REQUIRE_SHARED");
      if ((ci && *ci && std::strcmp(ci, "0") != 0 && std::strcmp(ci, "false") != 0) || (req && std::strcmp(req, "1") == 0))
        std::abort();
    }
    return out;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  {  // every pre-tokenizer kind (most have no suite vocabulary): the pieces put back together are the text
    const auto kind = static_cast<tkv::PreTokenizer>((data[1] >> 2) % (static_cast<int>(tkv::PreTokenizer::kDefault) + 1));
    const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
    std::string whole, joined;
    for (uint32_t c : tkv::utf8_to_cpts(text)) whole += tkv::cpt_to_utf8(c);
    for (const auto& piece : tkv::pre_tokenize(text, kind)) joined += piece;
    if (joined != whole) std::abort();
  }
  const auto& vocabs = vocabularies();
  if (vocabs.empty()) return 0;
  const tkv::Tokenizer& t = vocabs[data[0] % vocabs.size()];
  const bool add_bos = data[1] & 1, special = data[1] & 2;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const auto ids = t.encode(text, add_bos, special);
  for (int32_t id : ids)
    if (id < 0 || id >= t.n_vocab()) std::abort();  // encode must only make real ids
  (void)t.decode(ids);
  std::vector<int32_t> raw((size - 2) / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data + 2, raw.size() * 4);
  (void)t.decode(raw);
  for (int32_t id : raw) (void)t.piece(id);
  return 0;
}
