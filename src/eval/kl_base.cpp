#include "eval/kl_base.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "text/tokenizer.h"

namespace tkv {

Expected<KlBaseHeader> read_kl_header(std::istream& in, uint64_t size, const std::string& name) {
  KlBaseHeader h{};
  h.magic = 0;
  if (size < sizeof(h) || !in.read(reinterpret_cast<char*>(&h), sizeof(h)) || h.magic != kKlMagic)
    return Status::Error(name + ": not a turbokv KL base file (" + std::to_string(size) + " bytes, no TVKL header)");
  if (h.version != kKlVersion)
    return Status::Error(name + ": KL base version " + std::to_string(h.version) + ", expected " +
                         std::to_string(kKlVersion));
  if (h.n_ctx < 8 || h.n_ctx > (1u << 24))
    return Status::Error(name + ": n_ctx " + std::to_string(h.n_ctx) + " is out of range (8 .. 2^24)");
  if (h.n_vocab < 1 || h.n_vocab > uint64_t(kMaxVocab))
    return Status::Error(name + ": n_vocab " + std::to_string(h.n_vocab) + " is out of range (1 .. " +
                         std::to_string(kMaxVocab) + ")");
  if (h.per_chunk != kl_scored_per_chunk(h.n_ctx))
    return Status::Error(name + ": " + std::to_string(h.per_chunk) + " scored positions per chunk, -c " +
                         std::to_string(h.n_ctx) + " scores " + std::to_string(kl_scored_per_chunk(h.n_ctx)));
  if (h.chunks < 1) return Status::Error(name + ": holds no chunks");
  // At most 2^32 * 2^24 * 2^24 * 4 bytes: computed in long double, no wrap.
  const long double want = static_cast<long double>(h.chunks) * h.per_chunk * h.n_vocab * 4.0L + sizeof(h);
  if (want != static_cast<long double>(size))
    return Status::Error(name + ": file has " + std::to_string(size) + " bytes, its header (" +
                         std::to_string(h.chunks) + " chunks x " + std::to_string(h.per_chunk) + " positions x " +
                         std::to_string(h.n_vocab) + " floats) implies " +
                         std::to_string(static_cast<unsigned long long>(std::min(want, 1.8e19L))) +
                         (want < static_cast<long double>(size) ? " (trailing data)" : " (truncated)"));
  return h;
}

Status check_kl_row(const float* lp, uint32_t n_vocab, const std::string& name, uint64_t position) {
  double sum = 0;
  for (uint32_t v = 0; v < n_vocab; ++v) {
    if (!std::isfinite(lp[v]) || lp[v] > 1e-3f)
      return Status::Error(name + ": scored position " + std::to_string(position) + ", token " + std::to_string(v) +
                           ": " + std::to_string(lp[v]) + " is not a log-probability (the file is damaged)");
    sum += std::exp(static_cast<double>(lp[v]));
  }
  if (std::fabs(sum - 1.0) > 1e-3)
    return Status::Error(name + ": scored position " + std::to_string(position) + ": probabilities sum to " +
                         std::to_string(sum) + ", not 1 (the file is damaged)");
  return Status::Ok();
}

bool is_llama_kl(std::istream& in) {
  char m[8] = {};
  const bool ok = static_cast<bool>(in.read(m, 8)) && std::memcmp(m, kLlamaKlMagic, 8) == 0;
  in.clear();
  in.seekg(0);
  return ok;
}

Expected<LlamaKlBase> read_llama_kl(std::istream& in, uint64_t size, const std::string& name) {
  char magic[8] = {};
  uint32_t head[3] = {};
  if (size < 20 || !in.read(magic, 8) || std::memcmp(magic, kLlamaKlMagic, 8) != 0 ||
      !in.read(reinterpret_cast<char*>(head), sizeof(head)))
    return Status::Error(name + ": not a llama.cpp KL base file (" + std::to_string(size) + " bytes, no _logits_ header)");
  LlamaKlBase b;
  b.n_ctx = head[0];
  b.n_vocab = head[1];
  b.chunks = head[2];
  if (b.n_ctx < 8 || b.n_ctx > (1u << 24))
    return Status::Error(name + ": n_ctx " + std::to_string(b.n_ctx) + " is out of range (8 .. 2^24)");
  if (b.n_vocab < 1 || b.n_vocab > uint64_t(kMaxVocab))
    return Status::Error(name + ": n_vocab " + std::to_string(b.n_vocab) + " is out of range (1 .. " +
                         std::to_string(kMaxVocab) + ")");
  if (b.chunks < 1) return Status::Error(name + ": holds no chunks");
  b.per_chunk = kl_scored_per_chunk(b.n_ctx);
  // At most 20 + 2^32 * 2^24 * 4 + 2^32 * 2^24 * 2^25 bytes: long double, no wrap.
  const long double want = 20.0L + static_cast<long double>(b.chunks) * b.n_ctx * 4.0L +
                           static_cast<long double>(b.chunks) * b.per_chunk * llama_kl_row_u16(b.n_vocab) * 2.0L;
  if (want != static_cast<long double>(size))
    return Status::Error(name + ": file has " + std::to_string(size) + " bytes, its header (" + std::to_string(b.chunks) +
                         " chunks of " + std::to_string(b.n_ctx) + " tokens, " + std::to_string(b.n_vocab) +
                         " tokens of vocabulary) implies " +
                         std::to_string(static_cast<unsigned long long>(std::min(want, 1.8e19L))) +
                         (want < static_cast<long double>(size) ? " (trailing data)" : " (truncated)"));
  b.tokens.resize(size_t(b.chunks) * b.n_ctx);  // within the file's size, checked above
  if (!in.read(reinterpret_cast<char*>(b.tokens.data()), std::streamsize(b.tokens.size() * 4)))
    return Status::Error(name + ": truncated in its tokens");
  for (size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || uint32_t(b.tokens[i]) >= b.n_vocab)
      return Status::Error(name + ": token " + std::to_string(i) + " is " + std::to_string(b.tokens[i]) +
                           ", not an id below n_vocab " + std::to_string(b.n_vocab));
  return b;
}

Status decode_llama_kl_row(const uint16_t* row, uint32_t n_vocab, float* lp, const std::string& name,
                           uint64_t position) {
  float scale, least;
  std::memcpy(&scale, row, 4);
  std::memcpy(&least, row + 2, 4);
  const std::string at = name + ": scored position " + std::to_string(position) + ": ";
  // llama.cpp keeps at most 16 nats below the top: scale <= 16 / 65535.
  if (!std::isfinite(scale) || scale < 0 || scale > 17.0f / 65535 || !std::isfinite(least) || least > 1e-3f ||
      least < -1e4f)
    return Status::Error(at + "scale " + std::to_string(scale) + " and least log-probability " + std::to_string(least) +
                         " are not llama.cpp's packing (the file is damaged)");
  const uint16_t* q = row + 4;
  double sum = 0;
  for (uint32_t v = 0; v < n_vocab; ++v) {
    lp[v] = scale * q[v] + least;
    if (lp[v] > 1e-3f)
      return Status::Error(at + "token " + std::to_string(v) + ": " + std::to_string(lp[v]) +
                           " is not a log-probability (the file is damaged)");
    sum += std::exp(static_cast<double>(lp[v]));
  }
  // Each code is within scale/2 of its value (relative error <= scale/2 in
  // probability); tokens below the kept range count exp(least) each.
  const double slack = 1e-3 + double(scale) + n_vocab * std::exp(static_cast<double>(least));
  if (!(std::fabs(sum - 1.0) <= slack))
    return Status::Error(at + "probabilities sum to " + std::to_string(sum) + ", not 1 (the file is damaged)");
  return Status::Ok();
}

}  // namespace tkv
