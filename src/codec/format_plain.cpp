// f32, f16, bf16: plain rows, little-endian, no rotation. References only.
#include <cmath>
#include <cstring>

#include "codec/format.h"
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
  Status encode_row(float* x, uint8_t* out, Impl) const override {
    if (kind_ == kF32) {
      std::memcpy(out, x, sizeof(float) * d_);
      return Status::Ok();
    }
    for (int i = 0; i < d_; ++i) {
      if (kind_ == kF16 && std::fabs(x[i]) >= 65520.0f)
        return Status::Error("element " + std::to_string(i) + " = " + std::to_string(x[i]) +
                             " overflows f16 (max 65504)");
      const uint16_t h = kind_ == kF16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      if (kind_ == kBF16 && (h & 0x7fffu) == 0x7f80u)
        return Status::Error("element " + std::to_string(i) + " = " + std::to_string(x[i]) +
                             " overflows bf16 (rounds to infinity)");
      std::memcpy(out + 2 * i, &h, 2);
    }
    return Status::Ok();
  }
  void decode_row(const uint8_t* in, float* out, Impl) const override {
    if (kind_ == kF32) {
      std::memcpy(out, in, sizeof(float) * d_);
      return;
    }
    for (int i = 0; i < d_; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      out[i] = kind_ == kF16 ? f16_to_f32(h) : bf16_to_f32(h);
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
