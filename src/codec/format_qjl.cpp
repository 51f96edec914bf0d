// QJL residual formats (issue 20): a tq row plus a 1-bit sign sketch of what
// it missed, "tqB-qjl" and "tqB.5-qjl" (docs/FORMATS.md §4e).
//   y = R x (the tq rotation), ŷ its tqB row decoded, r = y - ŷ;
//   stored: the tq row, |r| as a 16-bit norm, m = d signs of S r, where S is
//   a seeded d x d matrix of N(0, 1) entries.
// Decoding adds r̂ = sqrt(pi/2) / m · |r| · Sᵀ sign(S r). For any q,
// E_S[q · r̂] = q · r: QJL's unbiased inner-product estimator
// (E[sign(s·r) (s·q)] = sqrt(2/pi) q·r / |r| for s ~ N(0, I)), written as a
// reconstruction so attention, the tools and the cache use it unchanged. Its
// rows decode through the codec (RowLayout kind kOpaque), d² multiply-adds a
// row: an experiment on quality first (RESULTS §17), not a fast path.
#include <cmath>
#include <cstring>
#include <vector>

#include "codec/format.h"
#include "codec/kernels.h"
#include "util/fp16.h"
#include "util/rng.h"

namespace tkv {

class QjlCodec final : public Codec {
 public:
  QjlCodec(std::string_view name, std::unique_ptr<Codec> base, uint64_t seed)
      : Codec(std::string(name), base->dim(), FormatFamily::kTurbo), base_(std::move(base)) {
    rotation_ = base_->rotation_;
    m_ = d_;
    row_bytes_ = base_->row_bytes() + 2 + (size_t(m_) + 7) / 8;
    layout_.kind = RowLayout::Kind::kOpaque;
    layout_.d = d_;
    Rng rng(seed ^ 0x51a3c0de5eed0001ull);
    S_.resize(size_t(m_) * d_);
    for (float& s : S_) s = static_cast<float>(rng.gaussian());
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl impl) const override {
    std::vector<float> copy(y, y + padded(d_));  // the base may modify its input
    if (Status s = base_->encode_row(copy.data(), out, impl); !s.ok()) return s;
    std::vector<float> r(d_);
    base_->decode_row(out, r.data(), impl);
    double rr = 0;
    for (int i = 0; i < d_; ++i) {
      r[i] = y[i] - r[i];
      rr += double(r[i]) * r[i];
    }
    const float norm = static_cast<float>(std::sqrt(rr));
    if (!(norm < kUNormMax)) return Status::Error("residual norm " + std::to_string(norm) + " out of range");
    const uint16_t h = f32_to_unorm16(norm);
    uint8_t* p = out + base_->row_bytes();
    std::memcpy(p, &h, 2);
    uint8_t* signs = p + 2;
    std::memset(signs, 0, (size_t(m_) + 7) / 8);
    for (int j = 0; j < m_; ++j) {
      double s = 0;
      const float* Sj = &S_[size_t(j) * d_];
      for (int i = 0; i < d_; ++i) s += double(Sj[i]) * r[i];
      if (s >= 0) signs[j >> 3] |= uint8_t(1u << (j & 7));
    }
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl impl) const override {
    base_->decode_row(in, out, impl);
    const uint8_t* p = in + base_->row_bytes();
    uint16_t h;
    std::memcpy(&h, p, 2);
    const float c = static_cast<float>(std::sqrt(M_PI / 2.0) / m_) * unorm16_to_f32(h);
    if (c == 0.0f) return;
    const uint8_t* signs = p + 2;
    for (int j = 0; j < m_; ++j) {
      const float s = (signs[j >> 3] >> (j & 7)) & 1 ? c : -c;
      const float* Sj = &S_[size_t(j) * d_];
      for (int i = 0; i < d_; ++i) out[i] += s * Sj[i];
    }
  }

 private:
  std::unique_ptr<Codec> base_;
  int m_ = 0;
  std::vector<float> S_;  // [m][d]
};

std::unique_ptr<Codec> make_qjl_codec(std::string_view name, int d, uint64_t seed) {
  constexpr std::string_view kSuffix = "-qjl";
  if (name.size() <= kSuffix.size() || name.substr(name.size() - kSuffix.size()) != kSuffix) return nullptr;
  auto base = make_turbo_codec(name.substr(0, name.size() - kSuffix.size()), d, seed);
  if (!base) return nullptr;
  return std::make_unique<QjlCodec>(name, std::move(base), seed);
}

}  // namespace tkv
