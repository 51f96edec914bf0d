// tq formats (TurboQuant-style): rotate, one 16-bit norm, Lloyd-Max codes.
//   tqB     B bits for every rotated coordinate (B = 1..8);
//   tqB.5   B.5 bits per value in total, norm included: the first k coordinates
//           get B+1 bits, the rest B, with k the largest that fits the budget
//           (for d < 32 not even k = 0 fits: the row is tqB's, B + 16/d bits);
//   -nc     norm correction: store n / ||ĉ|| so the decoded row keeps norm n.
// Codes are packed in bit planes (8, 4, 2, 1 bits wide) so no code straddles a byte.
#include <charconv>
#include <cmath>
#include <cstring>

#include "codec/format.h"
#include "codec/kernels.h"
#include "util/fp16.h"

namespace tkv {
namespace {

enum class NormMode { kPlain, kCorrect, kUnbiased };

class TurboCodec final : public Codec {
 public:
  TurboCodec(std::string_view name, int d, int bits, bool half, NormMode mode, std::shared_ptr<const Rotation> rot)
      : Codec(std::string(name), d, FormatFamily::kTurbo), bits_(bits), mode_(mode) {
    rotation_ = std::move(rot);
    lo_ = &lloyd_max(d, bits);
    k_ = 0;
    if (half) {
      hi_ = &lloyd_max(d, bits + 1);
      const double budget = (bits + 0.5) * d;  // bits per row
      for (int k = d; k >= 0; --k)
        if (8.0 * (2 + coded_bytes(k, bits + 1) + coded_bytes(d - k, bits)) <= budget) { k_ = k; break; }
    } else {
      hi_ = lo_;
    }
    row_bytes_ = 2 + coded_bytes(k_, bits + (half ? 1 : 0)) + coded_bytes(d - k_, bits);
    layout_.kind = RowLayout::Kind::kTurbo;
    layout_.d = d;
    size_t off = 2;
    for (int w = 0; w < 2; ++w) {
      const int n_vals = w == 0 ? k_ : d - k_;
      if (n_vals == 0) continue;
      RowLayout::Part& part = layout_.parts[layout_.nparts++];
      part.begin = w == 0 ? 0 : k_;
      part.count = n_vals;
      part.bits = w == 0 ? hi_->bits : bits_;
      part.centroids = (w == 0 ? hi_ : lo_)->centroids_f.data();
      int shift = 0;
      for (int width : plane_widths(part.bits)) {
        part.planes[part.nplanes++] = {width, shift, off};
        off += plane_bytes(n_vals, width);
        shift += width;
      }
    }
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl impl) const override {
    float ss = impl == Impl::kRef ? ref::sumsq(y, d_) : simd::sumsq(y, d_);
    double norm = std::sqrt(static_cast<double>(ss));
    if (!std::isfinite(ss)) {  // squares overflowed float: redo in double
      double s = 0;
      for (int i = 0; i < d_; ++i) s += static_cast<double>(y[i]) * y[i];
      norm = std::sqrt(s);
    }
    if (norm >= kUNormMax)
      return Status::Error("norm " + std::to_string(norm) + " exceeds the tq norm range (4.29e9)");
    const float n = static_cast<float>(norm);
    const float inv = recip_or_zero(n);
    uint8_t codes[1024];
    auto enc = impl == Impl::kRef ? ref::encode_cells : simd::encode_cells;
    enc(y, k_, inv, hi_->boundaries_f.data(), static_cast<int>(hi_->boundaries_f.size()), codes);
    enc(y + k_, d_ - k_, inv, lo_->boundaries_f.data(), static_cast<int>(lo_->boundaries_f.size()), codes + k_);
    float stored = n;
    if (mode_ != NormMode::kPlain && n > 0.0f) {
      double c2 = 0, uc = 0;
      for (int i = 0; i < d_; ++i) {
        const double c = (i < k_ ? hi_ : lo_)->centroids_f[codes[i]];
        c2 += c * c;
        uc += c * (static_cast<double>(y[i]) / norm);
      }
      // -nc: decoded norm equals n.  -ip: the decoded row's component along x
      // equals x, so q·x̂ - q·x is zero-mean over rotations (unbiased scores).
      stored = static_cast<float>(mode_ == NormMode::kCorrect ? norm / std::sqrt(c2) : norm / uc);
    }
    if (!(stored < kUNormMax))  // -nc / -ip store more than n
      return Status::Error("stored norm " + std::to_string(stored) + " exceeds the tq norm range (4.29e9)");
    const uint16_t h = f32_to_unorm16(stored);
    std::memcpy(out, &h, 2);
    for (int pi = 0; pi < layout_.nparts; ++pi) {
      const RowLayout::Part& part = layout_.parts[pi];
      for (int k = 0; k < part.nplanes; ++k)
        pack_plane(codes + part.begin, part.count, part.planes[k].width, part.planes[k].shift,
                   out + part.planes[k].offset);
    }
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl impl) const override {
    uint16_t h;
    std::memcpy(&h, in, 2);
    const float scale = unorm16_to_f32(h);
    uint8_t codes[1024];
    std::memset(codes, 0, d_);
    for (int pi = 0; pi < layout_.nparts; ++pi) {
      const RowLayout::Part& part = layout_.parts[pi];
      for (int k = 0; k < part.nplanes; ++k)
        unpack_plane_or(in + part.planes[k].offset, part.count, part.planes[k].width, part.planes[k].shift,
                        codes + part.begin);
    }
    auto dec = impl == Impl::kRef ? ref::decode_cells : simd::decode_cells;
    dec(codes, k_, hi_->centroids_f.data(), scale, out);
    dec(codes + k_, d_ - k_, lo_->centroids_f.data(), scale, out + k_);
  }

 private:
  int bits_;
  NormMode mode_;
  int k_;  // coordinates coded with hi_ (bits_ + 1 bits for tqB.5)
  const Codebook* lo_;
  const Codebook* hi_;
};

}  // namespace

std::unique_ptr<Codec> make_turbo_codec(std::string_view name, int d, uint64_t seed) {
  std::string_view s = name.substr(2);
  NormMode mode = NormMode::kPlain;
  if (s.size() > 3 && s.substr(s.size() - 3) == "-nc") { mode = NormMode::kCorrect; s.remove_suffix(3); }
  else if (s.size() > 3 && s.substr(s.size() - 3) == "-ip") { mode = NormMode::kUnbiased; s.remove_suffix(3); }
  bool half = false;
  if (s.size() > 2 && s.substr(s.size() - 2) == ".5") { half = true; s.remove_suffix(2); }
  int bits = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), bits);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return nullptr;
  if (bits < 1 || bits > (half ? 7 : 8)) return nullptr;
  auto rot = Rotation::make(d, seed);
  if (!rot) return nullptr;
  return std::make_unique<TurboCodec>(name, d, bits, half, mode, *rot);
}

}  // namespace tkv
