// The bitshift trellis of the ttB formats (codec/format_trellis.cpp,
// docs/FORMATS.md §4f), exposed for tests: the state after code c is
// (state << B | c) mod 64, a coordinate's value is table[state].
#pragma once
#include <cstdint>
#include <vector>

namespace tkv {

constexpr int kTrellisStateBits = 6, kTrellisStates = 1 << kTrellisStateBits;
// The 64 values for B bits (B = 1..4): constants trained on N(0, 1).
const std::vector<float>& trellis_table(int bits);
// The training that made them (seconds): Lloyd iterations over Viterbi paths.
std::vector<float> trellis_train_table(int bits);
// The code sequence (B bits per value) whose states' values have the least
// squared error against x[0..n), starting from state 0; returns that error.
double trellis_viterbi(const float* x, int n, int bits, const float* table, uint8_t* codes);

}  // namespace tkv
