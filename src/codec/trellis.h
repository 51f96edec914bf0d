// The bitshift trellis of the ttB formats (codec/format_trellis.cpp,
// docs/FORMATS.md §4f), exposed for tests: the state after code c is
// (state << B | c) mod 64, a coordinate's value is table[state].
#pragma once
#include <cstdint>
#include <vector>

namespace tkv {

constexpr int kTrellisStateBits = 6, kTrellisStates = 1 << kTrellisStateBits;
constexpr int kTrellisRounds = 60;
// The 64 values for B bits (B = 1..4): constants trained on N(0, 1).
const std::vector<float>& trellis_table(int bits);
// The start trellis_table(B) was trained from (the best of several).
int trellis_trial(int bits);
// The training that made them (about a second): Lloyd iterations over
// Viterbi paths from 64 random values (the start drawn from `trial`).
std::vector<float> trellis_train_table(int bits, int trial);
// The code sequence (B bits per value) whose states' values have the least
// squared error against x[0..n), starting from state 0; returns that error.
double trellis_viterbi(const float* x, int n, int bits, const float* table, uint8_t* codes);
// The same with widths[t] bits (1..4) and tables[t] for coordinate t (ttB.5).
double trellis_viterbi(const float* x, int n, const uint8_t* widths, const float* const* tables, uint8_t* codes);

}  // namespace tkv
