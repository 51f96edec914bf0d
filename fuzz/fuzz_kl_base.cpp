// libFuzzer harness for the KL base reader (eval/kl_base.h): the header
// checks against the input's size, then every stored row's check, as
// `perplexity --kl-base` reads them. Seeds in fuzz/corpus/kl_base/.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "eval/kl_base.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  auto h = tkv::read_kl_header(in, size, "fuzz.kl");
  if (!h) return 0;
  // The header was checked against the size: these rows are in the input.
  std::vector<float> row(h->n_vocab);
  const uint64_t rows = uint64_t(h->chunks) * h->per_chunk;
  for (uint64_t r = 0; r < rows; ++r) {
    if (!in.read(reinterpret_cast<char*>(row.data()), std::streamsize(row.size() * 4))) __builtin_trap();
    if (!tkv::check_kl_row(row.data(), h->n_vocab, "fuzz.kl", r).ok()) break;
  }
  return 0;
}
