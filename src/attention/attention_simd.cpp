// SIMD attention core (Highway, runtime dispatch). Per block of 32 rows: decode
// each K row once into L1 (codes -> centroid floats via lane permutes), dot it
// with every query of the group, online softmax, then decode each V row once
// and accumulate it for every query. Memory traffic is the compressed rows
// only; queries and accumulators stay in L1.
#include <cmath>
#include <cstring>
#include <limits>

#include "attention/kernel.h"
#include "util/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace tkv::attn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;

int Lanes() { return static_cast<int>(hn::Lanes(DF())); }

bool FastOk(const RowLayout& L, int d) {
  const int N = Lanes();
  if (d % N != 0 || N > 16) return false;
  switch (L.kind) {
    case RowLayout::Kind::kF32:
    case RowLayout::Kind::kF16:
    case RowLayout::Kind::kBF16:
      return true;
    case RowLayout::Kind::kQ8_0:
    case RowLayout::Kind::kQ4_0:
      return 32 % N == 0;
    case RowLayout::Kind::kTurbo:
      if (N < 8) return false;  // planes need whole bytes per chunk
      for (int p = 0; p < L.nparts; ++p)
        if (L.parts[p].begin % N != 0 || L.parts[p].count % N != 0) return false;
      return true;
  }
  return false;
}

// Codes of N consecutive coordinates (part-relative index c, a multiple of N)
// from a row's bit planes, natural order, as i32 lanes.
HWY_INLINE hn::Vec<DI> PartCodes(const uint8_t* row, const RowLayout::Part& part, int c) {
  const DI di;
  const DU du;
  const auto lane = hn::Iota(du, 0);
  auto code = hn::Zero(du);
  for (int k = 0; k < part.nplanes; ++k) {
    const RowLayout::Plane& pl = part.planes[k];
    const int w = pl.width;
    // N codes of w bits = N*w bits <= 128: one 16-byte load, broadcast per block.
    const auto words = hn::LoadDup128(du, reinterpret_cast<const uint32_t*>(row + pl.offset + c * w / 8));
    const auto bitpos = hn::Mul(lane, hn::Set(du, static_cast<uint32_t>(w)));
    const auto idx = hn::IndicesFromVec(du, hn::ShiftRight<5>(bitpos));
    const auto sh = hn::And(bitpos, hn::Set(du, 31u));
    auto v = hn::And(hn::Shr(hn::TableLookupLanes(words, idx), sh), hn::Set(du, (1u << w) - 1u));
    code = hn::Or(code, hn::ShiftLeftSame(v, pl.shift));
  }
  return hn::BitCast(di, code);
}

HWY_INLINE hn::Vec<DF> Lookup(const float* table, int levels, hn::Vec<DI> code) {
  const DF df;
  const DI di;
  const int N = Lanes();
  if (levels <= N) return hn::TableLookupLanes(hn::LoadU(df, table), hn::IndicesFromVec(df, code));
  if (levels <= 2 * N) {
    const auto lo_idx = hn::IndicesFromVec(df, hn::And(code, hn::Set(di, N - 1)));
    const auto lo = hn::TableLookupLanes(hn::LoadU(df, table), lo_idx);
    const auto hi = hn::TableLookupLanes(hn::LoadU(df, table + N), lo_idx);
    return hn::IfThenElse(hn::RebindMask(df, hn::Gt(code, hn::Set(di, N - 1))), hi, lo);
  }
  return hn::GatherIndex(df, table, code);
}

// Decodes one row into out[0, dp) (coding domain, natural order); returns the
// factor the row's values must still be multiplied by (tq: the norm).
float DecodeRow(const RowReader& R, const uint8_t* row, float* out) {
  const DF df;
  const int N = Lanes();
  const int d = R.d;
  if (!R.fast) {
    R.codec->decode_rotated(row, out);
    for (int i = d; i < R.dp; ++i) out[i] = 0.0f;
    return 1.0f;
  }
  const RowLayout& L = R.layout;
  switch (L.kind) {
    case RowLayout::Kind::kF32:
      std::memcpy(out, row, sizeof(float) * d);
      return 1.0f;
    case RowLayout::Kind::kF16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto* p = reinterpret_cast<const hwy::float16_t*>(row);
      for (int c = 0; c < d; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, p + c)), df, out + c);
      return 1.0f;
    }
    case RowLayout::Kind::kBF16: {
      const hn::Rebind<hwy::bfloat16_t, DF> db;
      const auto* p = reinterpret_cast<const hwy::bfloat16_t*>(row);
      for (int c = 0; c < d; c += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, p + c)), df, out + c);
      return 1.0f;
    }
    case RowLayout::Kind::kQ8_0: {
      const DI di;
      const hn::Rebind<int8_t, DI> d8;
      for (int c = 0; c < d; c += N) {
        const uint8_t* blk = row + (c / 32) * 34;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const auto q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + c % 32)));
        hn::StoreU(hn::Mul(hn::ConvertTo(df, q), hn::Set(df, f16_to_f32(h))), df, out + c);
      }
      return 1.0f;
    }
    case RowLayout::Kind::kQ4_0: {
      const DI di;
      const hn::Rebind<uint8_t, DI> d8;
      for (int c = 0; c < d; c += N) {
        const uint8_t* blk = row + (c / 32) * 18;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const int o = c % 32;
        auto b = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + (o & 15)));
        b = o < 16 ? hn::And(b, hn::Set(di, 15)) : hn::ShiftRight<4>(b);
        hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::Sub(b, hn::Set(di, 8))), hn::Set(df, f16_to_f32(h))), df,
                   out + c);
      }
      return 1.0f;
    }
    case RowLayout::Kind::kTurbo: {
      for (int p = 0; p < L.nparts; ++p) {
        const RowLayout::Part& part = L.parts[p];
        for (int c = 0; c < part.count; c += N)
          hn::StoreU(Lookup(R.tables[p], 1 << part.bits, PartCodes(row, part, c)), df, out + part.begin + c);
      }
      uint16_t h;
      std::memcpy(&h, row, 2);
      return unorm16_to_f32(h);
    }
  }
  return 1.0f;
}

// Copies rows that end within 16 bytes of the buffer end, so decoders may
// over-read (LoadDup128) safely.
HWY_INLINE const uint8_t* SafeRow(const uint8_t* row, size_t bytes, const uint8_t* end, uint8_t* scratch) {
  if (row + bytes + 16 <= end) return row;
  std::memcpy(scratch, row, bytes);
  std::memset(scratch + bytes, 0, 16);
  return scratch;
}

constexpr int kBlock = 32;

void RunWork(const RowReader& K, const RowReader& V, const Work& w) {
  const DF df;
  const int N = Lanes();
  const int dp = K.dp, G = w.G;
  HWY_ALIGN float kbuf[4][1024 + 16];
  HWY_ALIGN float vbuf[4][1024 + 16];
  HWY_ALIGN float s[kBlock];
  uint8_t kscratch[1024 * 4 + 64], vscratch[1024 * 4 + 64];
  float kscale[kBlock];
  // p[j][r]: softmax weights of the current block for query j.
  float* p = static_cast<float*>(alloca(sizeof(float) * G * kBlock));
  for (int j = 0; j < G; ++j) { w.m[j] = -std::numeric_limits<float>::infinity(); w.l[j] = 0.0f; }
  std::memset(w.acc, 0, sizeof(float) * G * dp);
  const auto neg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());

  for (int b0 = w.r0; b0 < w.r1; b0 += kBlock) {
    const int nb = std::min(kBlock, w.r1 - b0);
    // ---- scores: K rows decoded 4 at a time, each used for all G queries.
    for (int r = 0; r < nb; r += 4) {
      const int nr = std::min(4, nb - r);
      for (int i = 0; i < nr; ++i) {
        const uint8_t* row = SafeRow(w.k_base + (b0 + r + i) * w.k_stride, K.row_bytes, w.k_end, kscratch);
        kscale[r + i] = DecodeRow(K, row, kbuf[i]);
      }
      for (int i = nr; i < 4; ++i) std::memset(kbuf[i], 0, sizeof(float) * dp);
      for (int j = 0; j < G; ++j) {
        const float* q = w.q + static_cast<size_t>(j) * dp;
        auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
        for (int c = 0; c < dp; c += N) {
          const auto qv = hn::Load(df, q + c);
          a0 = hn::MulAdd(qv, hn::Load(df, kbuf[0] + c), a0);
          a1 = hn::MulAdd(qv, hn::Load(df, kbuf[1] + c), a1);
          a2 = hn::MulAdd(qv, hn::Load(df, kbuf[2] + c), a2);
          a3 = hn::MulAdd(qv, hn::Load(df, kbuf[3] + c), a3);
        }
        float* pj = p + j * kBlock;
        const float dots[4] = {hn::GetLane(hn::SumOfLanes(df, a0)), hn::GetLane(hn::SumOfLanes(df, a1)),
                               hn::GetLane(hn::SumOfLanes(df, a2)), hn::GetLane(hn::SumOfLanes(df, a3))};
        for (int i = 0; i < nr; ++i)
          pj[r + i] = (b0 + r + i < w.limit[j]) ? dots[i] * kscale[r + i] : -std::numeric_limits<float>::infinity();
      }
    }
    // ---- online softmax per query over this block.
    for (int j = 0; j < G; ++j) {
      float* pj = p + j * kBlock;
      for (int i = nb; i < kBlock; ++i) pj[i] = -std::numeric_limits<float>::infinity();
      auto vmax = neg_inf;
      for (int i = 0; i < kBlock; i += N) vmax = hn::Max(vmax, hn::LoadU(df, pj + i));
      const float bmax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      if (bmax == -std::numeric_limits<float>::infinity()) {
        for (int i = 0; i < kBlock; ++i) pj[i] = 0.0f;
        continue;
      }
      const float mnew = std::max(w.m[j], bmax);
      if (mnew > w.m[j]) {
        const float corr = std::exp(w.m[j] - mnew);  // 0 when m was -inf
        w.l[j] *= corr;
        float* aj = w.acc + static_cast<size_t>(j) * dp;
        const auto vc = hn::Set(df, corr);
        for (int c = 0; c < dp; c += N) hn::Store(hn::Mul(hn::Load(df, aj + c), vc), df, aj + c);
        w.m[j] = mnew;
      }
      const auto vm = hn::Set(df, mnew);
      auto vsum = hn::Zero(df);
      for (int i = 0; i < kBlock; i += N) {
        const auto x = hn::LoadU(df, pj + i);
        const auto e = hn::IfThenZeroElse(hn::Eq(x, neg_inf), hn::Exp(df, hn::Sub(x, vm)));
        hn::StoreU(e, df, pj + i);
        vsum = hn::Add(vsum, e);
      }
      w.l[j] += hn::GetLane(hn::SumOfLanes(df, vsum));
    }
    // ---- values: V rows decoded 4 at a time, accumulated for all G queries.
    for (int r = 0; r < nb; r += 4) {
      const int nr = std::min(4, nb - r);
      float vs[4] = {0, 0, 0, 0};
      int live = 0;
      for (int i = 0; i < nr; ++i) {
        bool keep = true;
        if (w.sparse_v > 0.0f) {
          keep = false;  // weights are relative to the running max (<= 1)
          for (int j = 0; j < G && !keep; ++j) keep = p[j * kBlock + r + i] >= w.sparse_v;
          if (!keep) ++*w.skipped;
        }
        if (keep) {
          const uint8_t* row = SafeRow(w.v_base + (b0 + r + i) * w.v_stride, V.row_bytes, w.v_end, vscratch);
          vs[i] = DecodeRow(V, row, vbuf[i]);
          ++live;
        } else {
          vs[i] = 0.0f;
          std::memset(vbuf[i], 0, sizeof(float) * dp);
        }
      }
      if (live == 0) continue;
      for (int i = nr; i < 4; ++i) { vs[i] = 0.0f; std::memset(vbuf[i], 0, sizeof(float) * dp); }
      for (int j = 0; j < G; ++j) {
        const float* pj = p + j * kBlock + r;
        const auto w0 = hn::Set(df, pj[0] * vs[0]);
        const auto w1 = hn::Set(df, nr > 1 ? pj[1] * vs[1] : 0.0f);
        const auto w2 = hn::Set(df, nr > 2 ? pj[2] * vs[2] : 0.0f);
        const auto w3 = hn::Set(df, nr > 3 ? pj[3] * vs[3] : 0.0f);
        float* aj = w.acc + static_cast<size_t>(j) * dp;
        for (int c = 0; c < dp; c += N) {
          auto a = hn::Load(df, aj + c);
          a = hn::MulAdd(w0, hn::Load(df, vbuf[0] + c), a);
          a = hn::MulAdd(w1, hn::Load(df, vbuf[1] + c), a);
          a = hn::MulAdd(w2, hn::Load(df, vbuf[2] + c), a);
          a = hn::MulAdd(w3, hn::Load(df, vbuf[3] + c), a);
          hn::Store(a, df, aj + c);
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv::attn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tkv::attn {
HWY_EXPORT(FastOk);
HWY_EXPORT(RunWork);
bool reader_fast_ok(const RowLayout& layout, int d) { return HWY_DYNAMIC_DISPATCH(FastOk)(layout, d); }
void run_work(const RowReader& k, const RowReader& v, const Work& w) { HWY_DYNAMIC_DISPATCH(RunWork)(k, v, w); }
}  // namespace tkv::attn
#endif
