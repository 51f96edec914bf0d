// Per-target row decoders of the SIMD attention core (attention_simd.cpp,
// which includes this once per Highway target): N values of a row in its
// coding domain, for every row kind but tq (read by the block loop there).
#if defined(TKV_ATTENTION_ROW_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TKV_ATTENTION_ROW_DECODE_INL_H_
#undef TKV_ATTENTION_ROW_DECODE_INL_H_
#else
#define TKV_ATTENTION_ROW_DECODE_INL_H_
#endif

#include <cstring>

#include <hwy/highway.h>

#include "attention/kernel.h"
#include "codec/lattice.h"
#include "util/fp16.h"

HWY_BEFORE_NAMESPACE();
namespace tkv::attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;

using Kind = RowLayout::Kind;

// A q8_0/q4_0 block's f16 scale broadcast to all lanes (hardware f16 -> f32).
HWY_INLINE hn::Vec<DF> BlockScale(const uint8_t* blk) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const hn::Rebind<uint16_t, DF> du16;
  uint16_t h;
  std::memcpy(&h, blk, 2);
  return hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, h)));
}

// te8: the lanes of group g from coordinate 8g + o (codec/lattice.h): the
// pattern's values, signs by XOR (one table row by the pattern's parity bit
// and the 7 sign bits, coordinate 7's included), the shift; d8 has at most
// 8 lanes.
template <class D8>
HWY_INLINE hn::Vec<D8> E8Group(D8 d8, const uint8_t* row, int g, int o) {
  const hn::RebindToUnsigned<D8> du8;
  uint16_t c16;
  std::memcpy(&c16, row + 2 + 2 * g, 2);  // little-endian (util/fp16.h)
  const unsigned code = c16;
  const unsigned p = code & 255;
  auto v = hn::LoadU(d8, &kE8Tables.values[p][o]);
  const auto sg = hn::LoadU(du8, &kE8Tables.signs[p >> 7][(code >> 8) & 127][o]);
  v = hn::BitCast(d8, hn::Xor(hn::BitCast(du8, v), sg));
  // +-1/4 built from bits (0x3e800000 is 0.25f): a select on the random
  // shift bit compiled to a branch that mispredicted half the time (te8
  // decoded 3.5x slower than tq2 at 64K; RESULTS §17.3).
  const auto shift = hn::Set(du8, 0x3e800000u | (code >> 15) << 31);
  return hn::Add(v, hn::BitCast(d8, shift));
}

// A chunk of N lanes of a te8 row from coordinate c: two groups when N is 16
// (FastOk allows no other N above 8), else part of one.
template <class D>
HWY_INLINE hn::Vec<D> E8Chunk(D d, const uint8_t* row, int c) {
#if HWY_TARGET != HWY_SCALAR  // (the scalar target has no Combine)
  if constexpr (hn::MaxLanes(D()) >= 16) {
    const hn::Half<D> dh;
    return hn::Combine(d, E8Group(dh, row, c / 8 + 1, 0), E8Group(dh, row, c / 8, 0));
  } else {
    return E8Group(d, row, c / 8, c % 8);
  }
#else
  return E8Group(d, row, c / 8, c % 8);
#endif
}

// N values of a non-tq row starting at coordinate c (a multiple of N), in the
// coding domain (tq rows are read by BlockLoop).
template <Kind KIND>
HWY_INLINE hn::Vec<DF> Decode(int c, const uint8_t* row) {
  static_assert(KIND != Kind::kTurbo, "tq rows are read by BlockLoop");
  const DF df;
  const DI di;
  if constexpr (KIND == Kind::kF32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (KIND == Kind::kF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + c));
  } else if constexpr (KIND == Kind::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(row) + c));
  } else if constexpr (KIND == Kind::kQ8_0) {
    const hn::Rebind<int8_t, DI> d8;
    const uint8_t* blk = row + (c / 32) * 34;
    const auto q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + c % 32)));
    return hn::Mul(hn::ConvertTo(df, q), BlockScale(blk));
  } else if constexpr (KIND == Kind::kE8) {
    return E8Chunk(df, row, c);
  } else {  // kQ4_0
    const hn::Rebind<uint8_t, DI> d8;
    const uint8_t* blk = row + (c / 32) * 18;
    const int o = c % 32;
    auto b = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + (o & 15)));
    b = o < 16 ? hn::And(b, hn::Set(di, 15)) : hn::ShiftRight<4>(b);
    return hn::Mul(hn::ConvertTo(df, hn::Sub(b, hn::Set(di, 8))), BlockScale(blk));
  }
}

template <Kind KIND>
HWY_INLINE float RowScale(const uint8_t* row) {
  if constexpr (KIND == Kind::kTurbo || KIND == Kind::kE8) {
    uint16_t h;
    std::memcpy(&h, row, 2);
    return unorm16_to_f32(h);
  } else {
    return 1.0f;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv::attn
HWY_AFTER_NAMESPACE();

#endif  // TKV_ATTENTION_ROW_DECODE_INL_H_
