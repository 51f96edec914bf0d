// The bitshift trellis of the ttB, ttB.5 and ttcB formats
// (codec/format_trellis.cpp, docs/FORMATS.md §4f): the state after a code c
// of w bits is (state << w | c) mod 64, a coordinate's value is
// table_w[state]. Codes go into one bit stream most significant bit first,
// so a state is the stream's last 6 bits, the newest the lowest: a window
// that a reader can take at a fixed offset per coordinate.
#pragma once
#include <cstdint>
#include <vector>

#include "codec/format.h"

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

// The stream: code t's widths[t] bits, most significant first, at stream
// bits e_{t-1} .. e_t - 1 (e_t = widths[0] + ... + widths[t]); stream bit p is
// bit p % 8 of out[p / 8]. trellis_pack ORs into out (zeroed by the caller).
void trellis_pack(const uint8_t* codes, const uint8_t* widths, int n, uint8_t* out);
// Values scale * tables[t][state_t] of a stream (the specification).
void trellis_unpack(const uint8_t* in, const uint8_t* widths, const float* const* tables, int n, float scale,
                    float* out);
// table_w permuted for readers: entry W is table_w[state] for the state whose
// stream bits e - 6 .. e - 1, read as a little-endian number, are W (the
// 6-bit reversal of state).
const float* trellis_window_table(int bits);
// The RowLayout of a stream of n codes (kind kTrellis): runs of one width
// over consecutive coordinates (coords[k], or k when null) as parts; more
// runs than a layout holds leave it kOpaque. L.d is the caller's.
void trellis_layout(const uint8_t* widths, const int* coords, int n, RowLayout& L);

}  // namespace tkv
