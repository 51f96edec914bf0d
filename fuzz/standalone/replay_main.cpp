// Runs a libFuzzer harness (fuzz/*.cpp) without libFuzzer, for the sanitizer
// build of `make test`: every seed of its corpus, then a fixed number of
// mutants of them (bit flips, interesting bytes, inserted, deleted and
// repeated ranges, splices of two seeds, truncations) from a fixed random
// seed, so a run is the same every time. Any sanitizer report fails the test
// (the build aborts on the first one). Coverage-guided fuzzing is `make fuzz`
// (clang, libFuzzer); this keeps every harness building and running under
// AddressSanitizer and UBSan in the suite. Every harness is linked into one
// binary, its LLVMFuzzerTestOneInput renamed tkv_fuzz_NAME (CMakeLists.txt).
//   tkv_fuzz_replay NAME CORPUS_DIR MUTANTS
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define X(name) extern "C" int tkv_fuzz_##name(const uint8_t* data, size_t size);
TKV_FUZZ_HARNESSES
#undef X

namespace {

using Harness = int (*)(const uint8_t*, size_t);
struct Entry {
  const char* name;
  Harness fn;
};
#define X(name) {#name, tkv_fuzz_##name},
const Entry kHarnesses[] = {TKV_FUZZ_HARNESSES};
#undef X

struct Rng {  // splitmix64: enough for choosing mutations
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
};

void run(Harness fn, const std::vector<uint8_t>& in) {
  // A copy of exactly the input's size, so reading past it is a heap overflow.
  std::vector<uint8_t> buf(in);
  fn(buf.empty() ? nullptr : buf.data(), buf.size());
}

std::vector<uint8_t> mutate(const std::vector<std::vector<uint8_t>>& seeds, Rng& rng) {
  std::vector<uint8_t> x = seeds[rng.below(seeds.size())];
  const int ops = 1 + static_cast<int>(rng.below(4));
  for (int k = 0; k < ops; ++k) {
    const size_t n = x.size();
    switch (rng.below(7)) {
      case 0:  // flip a bit
        if (n) x[rng.below(n)] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1: {  // an interesting byte or 32-bit value
        static const uint32_t vals[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff, 0x80000000u, 0xffffffffu};
        if (n < 4) break;
        const uint32_t v = vals[rng.below(std::size(vals))];
        const size_t at = rng.below(n - 3);
        if (rng.below(2)) x[at] = static_cast<uint8_t>(v);
        else for (int b = 0; b < 4; ++b) x[at + b] = static_cast<uint8_t>(v >> (8 * b));
        break;
      }
      case 2: {  // insert random bytes
        const size_t at = rng.below(n + 1), len = 1 + rng.below(16);
        std::vector<uint8_t> r(len);
        for (auto& b : r) b = static_cast<uint8_t>(rng.next());
        x.insert(x.begin() + static_cast<long>(at), r.begin(), r.end());
        break;
      }
      case 3: {  // delete a range
        if (!n) break;
        const size_t at = rng.below(n), len = 1 + rng.below(std::min<size_t>(n - at, 64));
        x.erase(x.begin() + static_cast<long>(at), x.begin() + static_cast<long>(at + len));
        break;
      }
      case 4: {  // repeat a range
        if (!n) break;
        const size_t at = rng.below(n), len = 1 + rng.below(std::min<size_t>(n - at, 64));
        std::vector<uint8_t> r(x.begin() + static_cast<long>(at), x.begin() + static_cast<long>(at + len));
        x.insert(x.begin() + static_cast<long>(at), r.begin(), r.end());
        break;
      }
      case 5: {  // splice: this input's head, another's tail
        const auto& o = seeds[rng.below(seeds.size())];
        const size_t a = rng.below(n + 1), b = rng.below(o.size() + 1);
        x.resize(a);
        x.insert(x.end(), o.begin() + static_cast<long>(b), o.end());
        break;
      }
      default:  // truncate
        x.resize(rng.below(n + 1));
        break;
    }
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  Harness fn = nullptr;
  for (const Entry& e : kHarnesses)
    if (argc == 4 && std::string(argv[1]) == e.name) fn = e.fn;
  if (!fn) {
    std::fprintf(stderr, "usage: %s NAME CORPUS_DIR MUTANTS (NAME: a harness fuzz/fuzz_NAME.cpp)\n", argv[0]);
    return 2;
  }
  ++argv;  // now NAME, CORPUS_DIR, MUTANTS
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(argv[1], ec))
    if (e.is_regular_file()) files.push_back(e.path());
  if (ec || files.empty()) {
    std::fprintf(stderr, "%s: no seeds in %s\n", argv[0], argv[1]);
    return 2;
  }
  std::sort(files.begin(), files.end());  // the same order on every machine
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (const auto& s : seeds) run(fn, s);
  const long mutants = std::strtol(argv[2], nullptr, 10);
  Rng rng{0x7475726b6f6b7631ull};
  for (long i = 0; i < mutants; ++i) run(fn, mutate(seeds, rng));
  std::printf("fuzz replay %s: %zu seeds and %ld mutants, no findings\n", argv[0], seeds.size(), mutants);
  return 0;
}
