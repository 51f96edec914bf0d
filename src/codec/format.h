// codec/: rotations, codebooks and every KV row format (the Codec interface).
// It sees util/ only.
//
// KV row formats: one registry, one Codec per (format, head dim d, seed).
// A row is one head vector of one token; every format turns d floats into
// row_bytes() bytes (layouts in docs/FORMATS.md). Rotated formats also decode
// into the rotated domain (R x̂), which is where attention works.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codebook.h"
#include "codec/rotation.h"
#include "util/status.h"

namespace tkv {

enum class FormatFamily { kPlain, kLlamaBlock, kTurbo, kCalibrated };

// What attention kernels need to read rows without going through Codec:
// the kind of row, and for tq rows the code planes and centroid tables.
struct RowLayout {
  // kE8: te8 rows (a 16-bit scale, then a 16-bit E8 code per 8 coordinates;
  // codec/lattice.h). kTrellis: tt/ttc rows (a 16-bit scale, then one bit
  // stream; codec/trellis.h): parts are runs of one code width in stream
  // order, centroids its 64-entry window table. kOpaque: rows only the codec
  // decodes (no fast reader; QJL residuals).
  enum class Kind { kF32, kF16, kBF16, kQ8_0, kQ4_0, kTurbo, kE8, kTrellis, kOpaque };
  struct Plane {
    int width = 0;      // bits per code in this plane: 1, 2, 4 or 8
    int shift = 0;      // where these bits go in the code
    size_t offset = 0;  // byte offset of the plane in the row
  };
  struct Part {         // a run of coordinates coded with one codebook
    int begin = 0, count = 0, bits = 0;
    const float* centroids = nullptr;  // 2^bits entries
    int nplanes = 0;
    Plane planes[4];
  };
  static constexpr int kMaxParts = 8;  // tqc: one run per bit width 1..8
  Kind kind = Kind::kF32;
  int d = 0;
  // kTurbo: ascending, disjoint runs of coordinates (tq: [0, wide) then
  // [wide, d); tqc: one per bit width). Coordinates in no part decode to 0.
  int nparts = 0;
  Part parts[kMaxParts];
};

class Codec {
 public:
  virtual ~Codec() = default;
  const std::string& name() const { return name_; }
  int dim() const { return d_; }
  size_t row_bytes() const { return row_bytes_; }
  double bits_per_value() const { return 8.0 * static_cast<double>(row_bytes_) / d_; }
  FormatFamily family() const { return family_; }
  // Non-null when rows are coded after a rotation: decode_rotated() returns R x̂.
  const Rotation* rotation() const { return rotation_.get(); }
  const RowLayout& layout() const { return layout_; }

  // Quantize n rows of d floats into n * row_bytes() bytes. A row with NaN or
  // Inf, or a value outside the format's range, fails with a message naming the
  // row and element; rows before it are written, nothing after it.
  Status quantize(const float* x, size_t n, uint8_t* out, Impl impl = Impl::kSimd) const;
  // Decode n rows back to the original domain.
  void dequantize(const uint8_t* in, size_t n, float* out, Impl impl = Impl::kSimd) const;
  // Decode one row in the domain it was coded in (R x̂ for rotated formats).
  void decode_rotated(const uint8_t* row, float* out, Impl impl = Impl::kSimd) const {
    decode_row(row, out, impl);
    if (const float* s = coord_scale())
      for (int i = 0; i < d_; ++i) out[i] *= s[i];
  }
  // Per-coordinate scale of the coding domain, or null when all are 1
  // (calibrated formats: each component's standard deviation). A row decodes
  // to unscaled values u (what layout() describes) and R x̂ = coord_scale ⊙ u;
  // attention folds the scale into the query (K) and the output (V).
  const float* coord_scale() const { return coord_scale_.empty() ? nullptr : coord_scale_.data(); }
  void decode_unscaled(const uint8_t* row, float* out, Impl impl = Impl::kSimd) const { decode_row(row, out, impl); }

 protected:
  friend class QjlCodec;  // codes a tq row inside its own (format_qjl.cpp)
  Codec(std::string name, int d, FormatFamily fam) : name_(std::move(name)), d_(d), family_(fam) {}
  // Encode one finite row already in the coding domain (rotated if rotation()).
  // `row` is a copy padded with zeros to padded(d) floats; it may be modified.
  virtual Status encode_row(float* row, uint8_t* out, Impl impl) const = 0;
  virtual void decode_row(const uint8_t* in, float* out, Impl impl) const = 0;

  std::string name_;
  int d_;
  FormatFamily family_;
  size_t row_bytes_ = 0;
  std::shared_ptr<const Rotation> rotation_;
  RowLayout layout_;
  std::vector<float> coord_scale_;
};

// Creates a codec by name: f32 f16 bf16 q8_0 q4_0 q8_0r q4_0r tqB (B = 1..8),
// tqB.5 (B = 1..7, B.5 bits per value in total, norm included), each with an
// optional suffix -nc (norm correction) or -ip (unbiased inner products), then
// optionally -qjl (a 1-bit sign sketch of the residual); ttB (B = 1..4, a
// 64-state bitshift trellis); te8 (E8 lattice, 2 bits, d a multiple of 8). d from 8 to 1024 (q
// formats: any d, the last block zero-padded); the seed picks the rotation.
Expected<std::unique_ptr<Codec>> make_codec(std::string_view name, int d, uint64_t seed = kDefaultSeed);

// The formats `all` means in tools, in table order.
const std::vector<std::string>& all_format_names();
// Splits "a,b,c" (or "all") into validated names; the error names the bad one.
Expected<std::vector<std::string>> parse_format_list(std::string_view list);

// Family factories (one file each).
std::unique_ptr<Codec> make_plain_codec(std::string_view name, int d);
std::unique_ptr<Codec> make_llama_codec(std::string_view name, int d, uint64_t seed);
std::unique_ptr<Codec> make_turbo_codec(std::string_view name, int d, uint64_t seed);
std::unique_ptr<Codec> make_qjl_codec(std::string_view name, int d, uint64_t seed);
std::unique_ptr<Codec> make_trellis_codec(std::string_view name, int d, uint64_t seed);
std::unique_ptr<Codec> make_lattice_codec(std::string_view name, int d, uint64_t seed);

}  // namespace tkv
