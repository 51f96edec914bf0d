// The E8 lattice code of the te8 format (codec/format_lattice.cpp,
// docs/FORMATS.md §4g), exposed for tests: 16 bits code 8 coordinates as a
// point of the shifted lattice E8 + 1/4 (the all-ones vector times 1/4).
//   bits 0-7   an entry of a table of 256 patterns of absolute values, each
//              value an odd multiple of 1/2 (the half-integer coset D8 + 1/2
//              of E8 near the origin: every pattern of squared norm <= 10,
//              227 of them, and 29 of squared norm 12); entries 0-127 have
//              an even number of 3/2 values, 128-255 an odd number;
//   bits 8-14  the signs of coordinates 0-6 (1 = negative); coordinate 7's
//              sign is the one that puts y = signs x pattern in D8 + 1/2
//              (the coordinates minus 1/2 sum to an even integer);
//   bit 15     the shift: the point is y + 1/4 (0) or y - 1/4 (1).
// (D8 + 1/2) + 1/4 and (D8 + 1/2) - 1/4 = (D8 + 3/4) and (D8 + 1/4) make up
// E8 + 1/4, so the 2^16 points are the lattice coset's points nearest the
// origin, symmetric under negation.
#pragma once
#include <cstdint>

namespace tkv {

// Coordinates of unit variance are divided by this before coding: the
// codebook's scale with the least error on N(0, 1) rows (swept 0.70-1.30,
// then 0.92-1.00 by 0.01: RESULTS §17.3; a test checks 10% either side is worse).
constexpr float kE8Scale = 0.96f;
// The 8 coordinates of code c (lattice units: y +- 1/4).
void e8_decode(uint16_t c, float* out);
// The code of the point of the 2^16 nearest to w (lattice units); *err, if
// given, receives the squared distance.
uint16_t e8_encode(const float* w, float* err = nullptr);
// Whether the 8 values are a point of E8 + 1/4 (tests: the decoder returns lattice points).
bool e8_is_lattice_point(const float* v);

// What the attention kernels read te8 rows with (filled at program start):
// the table's patterns as values, and the sign-bit masks of all 8 lanes by
// (pattern parity, signs of coordinates 0-6). A pattern's parity (of its
// number of 3/2 values) is its entry's top bit, and coordinate 7 is negative
// when that plus the number of negative signs among 0-6 is odd.
struct E8Tables {
  alignas(64) float values[256][8];
  alignas(64) uint32_t signs[2][128][8];  // lane i: 0x80000000 when coordinate i is negative
};
extern const E8Tables kE8Tables;

}  // namespace tkv
