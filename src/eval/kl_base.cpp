#include "eval/kl_base.h"

#include <algorithm>
#include <cmath>

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

}  // namespace tkv
