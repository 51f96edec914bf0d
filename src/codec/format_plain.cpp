// f32, f16, bf16: plain rows, little-endian, no rotation. References only.
#include <cmath>
#include <cstring>

#include "codec/format.h"
#include "codec/kernels.h"
#include "util/fp16.h"

namespace tkv {
namespace {

class PlainCodec final : public Codec {
 public:
  enum Kind { kF32, kF16, kBF16 };
  PlainCodec(std::string_view name, int d, Kind k) : Codec(std::string(name), d, FormatFamily::kPlain), kind_(k) {
    row_bytes_ = static_cast<size_t>(d) * (k == kF32 ? 4 : 2);
    layout_.kind = k == kF32 ? RowLayout::Kind::kF32 : k == kF16 ? RowLayout::Kind::kF16 : RowLayout::Kind::kBF16;
    layout_.d = d;
  }

 protected:
  Status encode_row(float* x, uint8_t* out, Impl impl) const override {
    if (kind_ == kF32) {
      std::memcpy(out, x, sizeof(float) * d_);
      return Status::Ok();
    }
    // Range first: nothing may round to infinity (f16 max 65504; bf16 ~3.39e38).
    const float limit = kind_ == kF16 ? 65520.0f : bits_f32(0x7f7f8000u);
    for (int i = 0; i < d_; ++i)
      if (std::fabs(x[i]) >= limit)
        return Status::Error("element " + std::to_string(i) + " = " + std::to_string(x[i]) + " overflows " +
                             (kind_ == kF16 ? "f16 (max 65504)" : "bf16 (rounds to infinity)"));
    if (kind_ == kF16) {
      (impl == Impl::kRef ? ref::to_f16 : simd::to_f16)(x, d_, out);
    } else {
      (impl == Impl::kRef ? ref::to_bf16 : simd::to_bf16)(x, d_, out);
    }
    return Status::Ok();
  }
  void decode_row(const uint8_t* in, float* out, Impl impl) const override {
    if (kind_ == kF32) {
      std::memcpy(out, in, sizeof(float) * d_);
    } else if (kind_ == kF16) {
      (impl == Impl::kRef ? ref::from_f16 : simd::from_f16)(in, d_, out);
    } else {
      (impl == Impl::kRef ? ref::from_bf16 : simd::from_bf16)(in, d_, out);
    }
  }

 private:
  Kind kind_;
};

}  // namespace

std::unique_ptr<Codec> make_plain_codec(std::string_view name, int d) {
  if (name == "f32") return std::make_unique<PlainCodec>(name, d, PlainCodec::kF32);
  if (name == "f16") return std::make_unique<PlainCodec>(name, d, PlainCodec::kF16);
  if (name == "bf16") return std::make_unique<PlainCodec>(name, d, PlainCodec::kBF16);
  return nullptr;
}

}  // namespace tkv
