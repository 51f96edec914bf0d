// q8_0 and q4_0 with llama.cpp's block layouts (34 and 18 bytes per 32 values),
// plain or after the seeded rotation (q8_0r, q4_0r: llama.cpp's rotated KV cache).
// A d that is not a multiple of 32 gets a zero-padded last block.
#include <cmath>
#include <cstring>

#include "codec/format.h"
#include "codec/kernels.h"
#include "util/fp16.h"

namespace tkv {
namespace {

class LlamaBlockCodec final : public Codec {
 public:
  LlamaBlockCodec(std::string_view name, int d, bool q8, std::shared_ptr<const Rotation> rot)
      : Codec(std::string(name), d, FormatFamily::kLlamaBlock), q8_(q8) {
    rotation_ = std::move(rot);
    nblocks_ = (d + 31) / 32;
    row_bytes_ = static_cast<size_t>(nblocks_) * (q8 ? 34 : 18);
    layout_.kind = q8 ? RowLayout::Kind::kQ8_0 : RowLayout::Kind::kQ4_0;
    layout_.d = d;
  }

 protected:
  Status encode_row(float* x, uint8_t* out, Impl impl) const override {
    if (d_ % 32 == 0) return encode_blocks(x, out, impl);
    // Zero-pad the last block (the row buffer is only padded to 16 floats).
    std::vector<float> tmp(static_cast<size_t>(nblocks_) * 32, 0.0f);
    std::memcpy(tmp.data(), x, sizeof(float) * d_);
    return encode_blocks(tmp.data(), out, impl);
  }
  void decode_row(const uint8_t* in, float* out, Impl) const override {
    const int bs = q8_ ? 34 : 18;
    for (int b = 0; b < nblocks_; ++b) {
      const uint8_t* blk = in + b * bs;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const float dl = f16_to_f32(h);
      for (int j = 0; j < 32; ++j) {
        const int i = b * 32 + j;
        if (i >= d_) break;
        float v;
        if (q8_) {
          v = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * dl;
        } else {
          const uint8_t byte = blk[2 + (j & 15)];
          v = static_cast<float>(((j < 16) ? (byte & 15) : (byte >> 4)) - 8) * dl;
        }
        out[i] = v;
      }
    }
  }

 private:
  Status encode_blocks(const float* x, uint8_t* out, Impl impl) const {
    // Scales are f16: a block whose scale would overflow is an error, not inf.
    for (int b = 0; b < nblocks_; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      if (amax / (q8_ ? 127.0f : 8.0f) >= 65504.0f)
        return Status::Error("block " + std::to_string(b) + " max |x| = " + std::to_string(amax) +
                             " overflows the f16 scale of " + name_);
    }
    if (q8_) {
      if (impl == Impl::kRef) ref::quantize_q8_0(x, nblocks_, out);
      else simd::quantize_q8_0(x, nblocks_, out);
    } else {
      if (impl == Impl::kRef) ref::quantize_q4_0(x, nblocks_, out);
      else simd::quantize_q4_0(x, nblocks_, out);
    }
    return Status::Ok();
  }

  bool q8_;
  int nblocks_;
};

}  // namespace

std::unique_ptr<Codec> make_llama_codec(std::string_view name, int d, uint64_t seed) {
  const bool q8 = name.substr(0, 2) == "q8";
  const bool rotated = name.back() == 'r';
  std::shared_ptr<const Rotation> rot;
  if (rotated) {
    auto r = Rotation::make(d, seed);
    if (!r) return nullptr;
    rot = *r;
  }
  return std::make_unique<LlamaBlockCodec>(name, d, q8, std::move(rot));
}

}  // namespace tkv
