// The KL base file of `perplexity --kl-base`: a 40-byte header (magic "TVKL",
// version, model fingerprint, text hash, n_ctx, n_vocab, chunks, scored
// positions per chunk; host byte order), then the f32 log-probabilities of
// every scored position, n_vocab each. A run compared with its own base
// gives KLD 0, so the rows are stored exactly.
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "util/status.h"

namespace tkv {

constexpr uint32_t kKlMagic = 0x4C4B5654;  // "TVKL"
constexpr uint32_t kKlVersion = 1;

struct KlBaseHeader {
  uint32_t magic = kKlMagic, version = kKlVersion;
  uint64_t model = 0, text = 0;
  uint32_t n_ctx = 0, n_vocab = 0, chunks = 0, per_chunk = 0;
};
static_assert(sizeof(KlBaseHeader) == 40, "the header is written as it is laid out");

// Scored positions of a chunk of n_ctx tokens: the second half, less the last.
inline uint32_t kl_scored_per_chunk(uint32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }

// Reads the header of a base file of `size` bytes and checks it on its own:
// magic, version, every count in range and the file exactly as long as the
// header says (nothing is sized before that). Errors start with `name`.
Expected<KlBaseHeader> read_kl_header(std::istream& in, uint64_t size, const std::string& name);

// Checks one stored row before it is used: every value finite and a
// log-probability (<= 0 up to rounding), and the probabilities summing to 1
// (within 1e-3). `position` (0-based scored position) names the row in errors.
Status check_kl_row(const float* lp, uint32_t n_vocab, const std::string& name, uint64_t position);

// llama.cpp's KL base file (`llama-perplexity --kl-divergence-base`): the
// bytes "_logits_", n_ctx, n_vocab, n_chunk (u32), the n_chunk * n_ctx token
// ids of the text (i32), then for every chunk and scored position a row of
// llama_kl_row_u16(n_vocab) u16: two floats (scale, the least log-probability
// kept), then one code per token, log p = scale * code + min (tokens more
// than 16 nats below the top are stored at the least value), padded to an
// even count. Read by `perplexity --kl-divergence-base F --kl-divergence`,
// which then scores the file's tokens (no text needed), as llama.cpp does.
inline constexpr char kLlamaKlMagic[9] = "_logits_";
struct LlamaKlBase {
  uint32_t n_ctx = 0, n_vocab = 0, chunks = 0, per_chunk = 0;
  std::vector<int32_t> tokens;  // chunks * n_ctx, each < n_vocab
};
inline uint64_t llama_kl_row_u16(uint32_t n_vocab) { return 2 * ((uint64_t(n_vocab) + 1) / 2) + 4; }

// True when the stream (at its start) holds llama.cpp's magic; it is left at
// its start either way.
bool is_llama_kl(std::istream& in);
// Reads and checks the header and the tokens of a file of `size` bytes: counts
// in range, the size exactly what they imply, every token id below n_vocab.
Expected<LlamaKlBase> read_llama_kl(std::istream& in, uint64_t size, const std::string& name);
// One stored row as n_vocab log-probabilities, checked: scale and least value
// finite, scale >= 0, every value <= 0, the probabilities summing to 1 within
// the packing's error (each code +-scale/2; the tail stored at the least value).
Status decode_llama_kl_row(const uint16_t* row, uint32_t n_vocab, float* lp, const std::string& name,
                           uint64_t position);

}  // namespace tkv
