// A codec flattened into plain data, for kernels that cannot call a Codec's
// virtual functions: the CUDA backend (src/cuda/). Everything a row program
// needs (rotation, codebook boundaries and centroids, bit planes, norm mode,
// calibrated scales) is a FlatFormat plus one float array of tables that the
// format indexes by offset, so the pair can be copied to a device as is.
// The row programs over it (codec/flat_kernels.h) write the bytes the Codec
// writes; tests/cuda/cuda_test.cpp checks that for every format on the CPU.
#pragma once
#include <cstdint>
#include <vector>

#include "codec/format.h"
#include "util/status.h"

namespace tkv {

struct FlatPart {
  int begin = 0, count = 0, bits = 0, nplanes = 0;
  int width[4] = {0, 0, 0, 0}, shift[4] = {0, 0, 0, 0};
  uint32_t offset[4] = {0, 0, 0, 0};  // byte offset of each plane in the row
  int cent = -1;  // table offset: 2^bits centroids
  int bnd = -1;   // table offset: 2^bits - 1 ascending boundaries
};

struct FlatFormat {
  enum Kind { kF32, kF16, kBF16, kQ8_0, kQ4_0, kTurbo, kCalibrated };
  enum Rot { kNone, kHadamard, kDense };
  enum Norm { kPlain, kCorrect, kUnbiased };  // tq: plain, -nc, -ip
  int kind = kF32;
  int d = 0;
  uint32_t row_bytes = 0;
  int norm = kPlain;
  int rot = kNone;
  float rot_scale = 1.0f;   // Hadamard: 1/sqrt(d)
  int sign = -1;            // table offset: Hadamard signs [d]
  int cols = -1, rows = -1; // table offsets: dense Rᵀ and R, [d*d] row-major
  int coord_scale = -1;     // table offset [d]: calibrated sigma (attention folds it in)
  int inv_sigma = -1;       // table offset [d]: calibrated 1/sigma (0 where uncoded)
  uint32_t used_bytes = 0;  // calibrated: bytes the planes use (the rest are zero)
  int nparts = 0;
  FlatPart parts[RowLayout::kMaxParts];
};

// Appends codec's tables to `tables` and returns its flat description.
// Fails, naming the format, for rows only the codec itself can read (QJL
// residuals, trellis codes).
Expected<FlatFormat> flatten_codec(const Codec& codec, std::vector<float>& tables);

}  // namespace tkv
