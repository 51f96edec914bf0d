#include "matmul/matmul.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "matmul/matmul_tiled.h"
#include "gguf/weight_blocks.h"

#include "util/fp16.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "matmul/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/cache_control.h>

HWY_BEFORE_NAMESPACE();
namespace tkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bytes ahead of the loads that a one-token float row prefetches: one
// thread streaming F16 rows of 2048 / 5632 columns (a standalone loop over
// 700 MB, the best of 5 passes, alternating) read 27-31 / 17-25 GB/s
// without, 31-38 / 31-34 with 4-8 KB (1 KB: no gain): AMD's stream
// prefetcher stops at 4 KB pages, so each page's first lines were misses.
constexpr int64_t kFloatRowPrefetch = 6144;

// The prefetch goes to L2 (prefetcht1), not L1: on a Zen 4 EPYC (2026-12-05)
// prefetcht0 6 KB ahead ran a one-thread F16 tg16 at 8.8-14.7 tokens/s (12.5-
// 22 GB/s), below no prefetch at all (12-13), and prefetcht1 at 17-18 (27 GB/s):
// lines brought to L1 6 KB early evict the activation (22 KB for ffn_down in
// a 32 KB L1) before they are read. A standalone stream of 5632-wide F16 rows:
// 17 GB/s without, 17 with t0, 26 with t1.
// (__builtin_prefetch's locality 2: prefetcht1 on x86, as attention_simd.cpp's.)
HWY_INLINE void PrefetchL2(const void* p) { __builtin_prefetch(p, 0, 2); }

// Decode of a float row (F32 0, F16 1, BF16 30): four independent
// accumulators (one chain of FMAs waits 4 cycles per vector: 16 F16 weights
// per 4 cycles is ~21 GB/s at 2.6 GHz, below one core's share of the memory
// bandwidth), the weights prefetched kFloatRowPrefetch bytes ahead (past the
// row's end: the next row's, which the same thread reads next; a prefetch
// never faults); the tail and the reduction in a fixed order, so a token's
// bits depend on nothing else (matmul_tokens runs this per token too).
// X: the activations' type, float or hwy::float16_t (F16 rows against
// activations rounded to f16, F16ActRow: half the bytes; the two 64-byte
// activation loads per 64 bytes of weights compete with the weight stream.
// On this Zen 4 (2026-12-06), one-thread F16 tg32 of the 0.85B file
// alternated 3 times: 15.1, 15.3, 12.2 tokens/s with f32 activations, 17.9,
// 17.9, 16.5 with f16 ones (llama.cpp 15.4, 16.4, 15.4); a standalone
// stream of 5632-wide rows (scripts/harness/stream_f16.cpp, f16x), 6 KB
// prefetch: 20-24 GB/s against 20-27, noisy).
template <uint32_t kType, class X = float>
HWY_INLINE float FloatRowDot(const uint8_t* row, int64_t cols, const X* HWY_RESTRICT x) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kEsize = kType == 0 ? 4 : 2;
  auto load_w = [&](int64_t c) {
    if constexpr (kType == 0) {
      return hn::LoadU(df, reinterpret_cast<const float*>(row) + c);
    } else if constexpr (kType == 1) {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + c));
    } else {
      const hn::Rebind<hwy::bfloat16_t, decltype(df)> db;
      return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(row) + c));
    }
  };
  auto load_x = [&](int64_t c) {
    if constexpr (std::is_same_v<X, float>) {
      return hn::LoadU(df, x + c);
    } else {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      return hn::PromoteTo(df, hn::LoadU(dh, x + c));
    }
  };
  auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  int64_t c = 0;
  for (; c + 4 * N <= cols; c += 4 * N) {
    const uint8_t* p = row + c * kEsize + kFloatRowPrefetch;
    for (int64_t o = 0; o < 4 * N * kEsize; o += 64) PrefetchL2(p + o);
    a0 = hn::MulAdd(load_w(c), load_x(c), a0);
    a1 = hn::MulAdd(load_w(c + N), load_x(c + N), a1);
    a2 = hn::MulAdd(load_w(c + 2 * N), load_x(c + 2 * N), a2);
    a3 = hn::MulAdd(load_w(c + 3 * N), load_x(c + 3 * N), a3);
  }
  for (; c + N <= cols; c += N) a0 = hn::MulAdd(load_w(c), load_x(c), a0);
  float tail = 0.0f;
  for (; c < cols; ++c) {
    float wv;
    if constexpr (kType == 0) {
      std::memcpy(&wv, row + 4 * c, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, row + 2 * c, 2);
      wv = kType == 1 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    float xv;
    if constexpr (std::is_same_v<X, float>) {
      xv = x[c];
    } else {
      uint16_t a;
      std::memcpy(&a, x + c, 2);
      xv = f16_to_f32(a);
    }
    tail += wv * xv;
  }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)))) + tail;
}

// back * dot(F16 row, x16): x16 the activations scaled and rounded to f16
// (f16_decode_acts), back the scale's inverse.
float F16ActRow(const uint8_t* row, int64_t cols, const uint16_t* x16, float back) {
  return back * FloatRowDot<1>(row, cols, reinterpret_cast<const hwy::float16_t*>(x16));
}

// out = f16(x * s), nearest even (vcvtps2ph where the target has it).
void ToF16Scaled(const float* HWY_RESTRICT x, int64_t cols, float s, uint16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto* o = reinterpret_cast<hwy::float16_t*>(out);
  int64_t c = 0;
  for (; c + N <= cols; c += N) hn::StoreU(hn::DemoteTo(dh, hn::Mul(hn::LoadU(df, x + c), hn::Set(df, s))), dh, o + c);
  for (; c < cols; ++c) out[c] = f32_to_f16(x[c] * s);
}

// dot(W row, x) for each of n_tok vectors; the row is decoded chunk by chunk
// and reused across the tokens (weights are the bandwidth; x stays in cache).
void RowDots(uint32_t type, const uint8_t* row, int64_t cols, const float* x, int n_tok, int64_t x_stride,
             float* out, int64_t out_stride) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int kT = 4;  // tokens per pass
  if (n_tok == 1 && (type == 8 || type == 2) && N <= 16 && 16 % N == 0) {
    // Decode: one token, so the dot of a Q8_0/Q4_0 row needs independent
    // accumulators to hide the FMA latency (one chain per 16-value half block).
    const bool q8 = type == 8;
    const int64_t bb = q8 ? 34 : 18;
    const hn::Rebind<hwy::float16_t, decltype(df)> dh;
    const hn::Rebind<uint16_t, decltype(df)> du16;
    auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* blk = row + b * bb;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, h)));
      for (int64_t o = 0; o < 16; o += N) {
        decltype(hn::Zero(df)) w0, w1;  // values o.. and 16 + o..
        if (q8) {
          const hn::Rebind<int8_t, decltype(di)> d8;
          w0 = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + o))));
          w1 = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 18 + o))));
        } else {
          const hn::Rebind<uint8_t, decltype(di)> d8;
          const auto q = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + o));
          w0 = hn::ConvertTo(df, hn::Sub(hn::And(q, hn::Set(di, 15)), hn::Set(di, 8)));
          w1 = hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(q), hn::Set(di, 8)));
        }
        const auto x0 = hn::Mul(hn::LoadU(df, x + b * 32 + o), scale);
        const auto x1 = hn::Mul(hn::LoadU(df, x + b * 32 + 16 + o), scale);
        if (b & 1) {
          a2 = hn::MulAdd(w0, x0, a2);
          a3 = hn::MulAdd(w1, x1, a3);
        } else {
          a0 = hn::MulAdd(w0, x0, a0);
          a1 = hn::MulAdd(w1, x1, a1);
        }
      }
    }
    out[0] = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
    return;
  }
  if (n_tok == 1 && (type == 0 || type == 1 || type == 30)) {
    if (type == 1) out[0] = FloatRowDot<1>(row, cols, x);
    else if (type == 30) out[0] = FloatRowDot<30>(row, cols, x);
    else out[0] = FloatRowDot<0>(row, cols, x);
    return;
  }
  for (int t0 = 0; t0 < n_tok; t0 += kT) {
    const int nt = std::min(kT, n_tok - t0);
    decltype(hn::Zero(df)) acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = hn::Zero(df);
    auto fma_chunk = [&](int64_t c, decltype(hn::Zero(df)) w) {
      for (int t = 0; t < nt; ++t)
        acc[t] = hn::MulAdd(w, hn::LoadU(df, x + (t0 + t) * x_stride + c), acc[t]);
    };
    float tail[kT] = {0, 0, 0, 0};
    if (type == 0) {  // F32
      const float* w = reinterpret_cast<const float*>(row);
      int64_t c = 0;
      for (; c + N <= cols; c += N) fma_chunk(c, hn::LoadU(df, w + c));
      for (; c < cols; ++c)
        for (int t = 0; t < nt; ++t) tail[t] += w[c] * x[(t0 + t) * x_stride + c];
    } else if (type == 1 || type == 30) {  // F16, BF16
      int64_t c = 0;
      if (type == 1) {
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        const auto* w = reinterpret_cast<const hwy::float16_t*>(row);
        for (; c + N <= cols; c += N) fma_chunk(c, hn::PromoteTo(df, hn::LoadU(dh, w + c)));
      } else {
        const hn::Rebind<hwy::bfloat16_t, decltype(df)> db;
        const auto* w = reinterpret_cast<const hwy::bfloat16_t*>(row);
        for (; c + N <= cols; c += N) fma_chunk(c, hn::PromoteTo(df, hn::LoadU(db, w + c)));
      }
      for (; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, row + 2 * c, 2);
        const float wv = type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
        for (int t = 0; t < nt; ++t) tail[t] += wv * x[(t0 + t) * x_stride + c];
      }
    } else {  // Q8_0 (8) and Q4_0 (2): blocks of 32 with an f16 scale
      const bool q8 = type == 8;
      const int64_t bb = q8 ? 34 : 18;
      for (int64_t b = 0; b < cols / 32; ++b) {
        const uint8_t* blk = row + b * bb;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        // Hardware f16 -> f32 on the broadcast scale (a software conversion
        // per block of 32 weights would cost more than the block's FMAs).
        const hn::Rebind<hwy::float16_t, decltype(df)> dh;
        const hn::Rebind<uint16_t, decltype(df)> du16;
        const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16, h)));
        for (int64_t o = 0; o < 32; o += N) {
          decltype(hn::Zero(df)) w;
          if (q8) {
            const hn::Rebind<int8_t, decltype(di)> d8;
            w = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(blk + 2 + o))));
          } else {
            const hn::Rebind<uint8_t, decltype(di)> d8;
            auto q = hn::PromoteTo(di, hn::LoadU(d8, blk + 2 + (o & 15)));
            q = o < 16 ? hn::And(q, hn::Set(di, 15)) : hn::ShiftRight<4>(q);
            w = hn::ConvertTo(df, hn::Sub(q, hn::Set(di, 8)));
          }
          fma_chunk(b * 32 + o, hn::Mul(w, scale));
        }
      }
    }
    for (int t = 0; t < nt; ++t) out[(t0 + t) * out_stride] = hn::GetLane(hn::SumOfLanes(df, acc[t])) + tail[t];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tkv {
HWY_EXPORT(RowDots);
HWY_EXPORT(F16ActRow);
HWY_EXPORT(ToF16Scaled);

Expected<Matrix> matrix_from(const gguf::Tensor& t, const std::string& path) {
  const uint32_t ok_types[] = {0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30, kMxfp4Type};
  bool ok = false;
  for (uint32_t k : ok_types) ok |= t.type == k;
  if (!ok)
    return Status::Error(path + ": tensor '" + t.name + "' has type " + t.info().name +
                         ", which the runtime does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4)");
  if (t.dims.size() > 2) return Status::Error(path + ": tensor '" + t.name + "' has more than 2 dims");
  Matrix m;
  m.data = t.data;
  m.type = t.type;
  m.cols = static_cast<int64_t>(t.dims[0]);
  m.rows = t.dims.size() > 1 ? static_cast<int64_t>(t.dims[1]) : 1;
  m.row_bytes = static_cast<size_t>(m.cols / t.info().block * t.info().block_bytes);
  return m;
}

namespace {

MatmulCore core_from_env() {
  const char* e = std::getenv("TKV_MATMUL");
  if (!e) return MatmulCore::kAuto;
  auto c = parse_matmul_core(e);
  return c ? *c : MatmulCore::kAuto;
}

std::atomic<int> g_core{-1};

}  // namespace

Expected<MatmulCore> parse_matmul_core(const std::string& name) {
  if (name == "auto" || name == "new") return MatmulCore::kAuto;
  if (name == "rows" || name == "old") return MatmulCore::kRows;
  if (name == "tiled") return MatmulCore::kTiled;
  if (name == "int8") return MatmulCore::kInt8;
  return Status::Error("unknown matmul core '" + name + "' (auto|new, rows|old, tiled, int8)");
}

const char* matmul_core_name(MatmulCore c) {
  switch (c) {
    case MatmulCore::kRows: return "rows";
    case MatmulCore::kTiled: return "tiled";
    case MatmulCore::kInt8: return "int8";
    default: return "auto";
  }
}

MatmulCore matmul_core() {
  int c = g_core.load(std::memory_order_relaxed);
  if (c < 0) {
    c = static_cast<int>(core_from_env());
    g_core.store(c, std::memory_order_relaxed);
  }
  return static_cast<MatmulCore>(c);
}

void set_matmul_core(MatmulCore c) { g_core.store(static_cast<int>(c), std::memory_order_relaxed); }

namespace {
// Activations of a one-token F16 product (F16ActRow), as llama.cpp rounds
// them for F16 weights (its vec_dot_type): x scaled by the power of two
// that puts max|x| in [2^14, 2^15) (exact; no value overflows f16, and
// only those 2^24 below the largest lose bits as subnormals), then rounded
// to f16, nearest even: each value within 2^-11 of itself. back undoes the
// scale. False (nothing done) when x holds NaN or infinity: the f32 rows
// then carry them.
bool f16_decode_acts(const float* x, int64_t cols, uint16_t* x16, float* back) {
  float amax = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    const float a = std::fabs(x[c]);
    if (!(a <= FLT_MAX)) return false;
    amax = std::max(amax, a);
  }
  int e = 0;
  if (amax > 0.0f) {
    int k = 0;
    std::frexp(amax, &k);  // amax in [2^(k-1), 2^k)
    e = std::clamp(15 - k, -126, 127);
  }
  HWY_DYNAMIC_DISPATCH(ToF16Scaled)(x, cols, std::ldexp(1.0f, e), x16);
  *back = std::ldexp(1.0f, -e);
  return true;
}

std::vector<uint16_t>& f16_scratch(size_t n) {
  thread_local std::vector<uint16_t> v;
  if (v.size() < n) v.resize(n);
  return v;
}

// Types whose few-token products take the int8 prefill core rather than the
// row core where the K-quant decode kernel (AVX512-VNNI, tried first) is
// absent: Q6_K, whose rows the row core expands to floats with scalar code
// (1.7 GFLOP/s at one token against the int8 core's 6.6, measured before
// that kernel existed). Q4_K's expansion is cheaper (8.5 against 6.9).
bool int8_for_decode(uint32_t type) { return type == 14 && int8_core_available(); }
}  // namespace

void matmul(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  matmul_with(matmul_core(), w, x, n_tok, y, threads);
}

void matmul_with(MatmulCore core, const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  if (core == MatmulCore::kAuto) {
    if (n_tok == 1 && matmul_int8_decode(w, x, y, threads)) return;
    if (n_tok == 1 && matmul_f16_decode(w, x, y, threads)) return;
    core = n_tok >= kTiledMinTokens || int8_for_decode(w.type) ? MatmulCore::kInt8 : MatmulCore::kRows;
  }
  if (core == MatmulCore::kInt8) {
    if (n_tok == 1 && matmul_int8_decode(w, x, y, threads)) return;
    if (matmul_int8(w, x, n_tok, y, threads)) return;
    if (n_tok >= amx_min_tokens(w.type) && matmul_amx(w, x, n_tok, y, threads)) return;
    if (matmul_int16(w, x, n_tok, y, threads)) return;
    if (matmul_bf16(w, x, n_tok, y, threads)) return;
    core = MatmulCore::kTiled;
  }
  if (core == MatmulCore::kTiled) return matmul_tiled_f32(w, x, n_tok, y, threads);
  matmul_rows(w, x, n_tok, y, threads);
}

void matmul_tokens(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  const MatmulCore core = matmul_core();
  if (n_tok == 1) return matmul_with(core, w, x, 1, y, threads);
  if (core == MatmulCore::kAuto || core == MatmulCore::kInt8)
    if (matmul_int8_decode_tokens(w, x, n_tok, y, threads)) return;
  // The int8 core gives each token the bits it gives that token alone.
  if (core == MatmulCore::kAuto && int8_for_decode(w.type) && matmul_int8(w, x, n_tok, y, threads)) return;
  if (core == MatmulCore::kAuto) {
    // One token takes kRows here (matmul_rows), whose RowDots has a one-token
    // path (float rows: four accumulators; Q8_0/Q4_0 without the int8 kernel:
    // one chain per half block), so each token takes that path alone while
    // the row is read from memory once (other block types: expanded to
    // floats once, as matmul_rows does): per token the same bits.
    const bool direct = w.type == 0 || w.type == 1 || w.type == 30 || w.type == 8 || w.type == 2;
    // F16: each token's activations rounded as matmul_f16_decode rounds them
    // (or, holding NaN or infinity, the f32 row as there).
    std::vector<uint16_t> x16(w.type == 1 ? static_cast<size_t>(n_tok * w.cols) : 0);
    std::vector<float> back(w.type == 1 ? n_tok : 0);
    std::vector<char> f16x(back.size());
    for (size_t t = 0; t < back.size(); ++t)
      f16x[t] = f16_decode_acts(x + t * w.cols, w.cols, &x16[t * w.cols], &back[t]);
#pragma omp parallel num_threads(threads) if (w.rows * w.cols > 65536)
    {
      std::vector<float> buf(direct ? 0 : w.cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < w.rows; ++r) {
        if (w.type == 1) {
          for (int t = 0; t < n_tok; ++t)
            if (f16x[t]) y[t * w.rows + r] = HWY_DYNAMIC_DISPATCH(F16ActRow)(w.data + r * w.row_bytes, w.cols, &x16[t * w.cols], back[t]);
            else HWY_DYNAMIC_DISPATCH(RowDots)(1, w.data + r * w.row_bytes, w.cols, x + t * w.cols, 1, w.cols, y + t * w.rows + r, w.rows);
          continue;
        }
        const uint8_t* row = w.data + r * w.row_bytes;
        uint32_t type = w.type;
        if (!direct) {
          unpack_f32(w.type, row, 0, w.cols, buf.data());
          row = reinterpret_cast<const uint8_t*>(buf.data());
          type = 0;
        }
        for (int t = 0; t < n_tok; ++t)
          HWY_DYNAMIC_DISPATCH(RowDots)(type, row, w.cols, x + t * w.cols, 1, w.cols, y + t * w.rows + r, w.rows);
      }
    }
    return;
  }
  // A core forced for comparison (TKV_MATMUL): token by token.
  std::vector<float> one(static_cast<size_t>(w.rows));
  for (int t = 0; t < n_tok; ++t) {
    matmul_with(core, w, x + t * w.cols, 1, one.data(), threads);
    std::copy(one.begin(), one.end(), y + t * w.rows);
  }
}

void matmul_many(const Matrix* const* ws, int n, const float* x, float* const* ys, int threads) {
  // Each matrix's kernel where matmul() would take it for one token: the
  // int8 one where it runs, else (float rows) the row core's one-token dot.
  bool team = matmul_core() == MatmulCore::kAuto && n > 0;
  int64_t work = 0;
  for (int i = 0; i < n && team; ++i) {
    const Matrix& w = *ws[i];
    const bool float_rows = w.type == 0 || w.type == 1 || w.type == 30;
    team = w.cols == ws[0]->cols && (int8_decode_team_supported(w) || float_rows);
    work += w.rows * w.cols;
  }
  if (!team) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, 1, ys[i], threads);
    return;
  }
  // F16 matrices: the activations rounded once for all (matmul_f16_decode's).
  bool f16x = false;
  float back = 1.0f;
  for (int i = 0; i < n; ++i) f16x |= ws[i]->type == 1;
  uint16_t* x16 = f16x ? f16_scratch(static_cast<size_t>(ws[0]->cols)).data() : nullptr;
  if (f16x) f16x = f16_decode_acts(x, ws[0]->cols, x16, &back);
  // The threshold of one matrix (65536) applies to each: below it matmul()
  // runs that matrix on one thread; its bits are the same either way.
#pragma omp parallel num_threads(threads) if (work > 65536)
  for (int i = 0; i < n; ++i) {
    const Matrix& w = *ws[i];
    if (int8_decode_team_supported(w)) {
      int8_decode_team(w, x, ys[i]);
    } else if (w.type == 1 && f16x) {
#pragma omp for schedule(static) nowait
      for (int64_t r = 0; r < w.rows; ++r)
        ys[i][r] = HWY_DYNAMIC_DISPATCH(F16ActRow)(w.data + r * w.row_bytes, w.cols, x16, back);
    } else {
#pragma omp for schedule(static) nowait
      for (int64_t r = 0; r < w.rows; ++r)
        HWY_DYNAMIC_DISPATCH(RowDots)(w.type, w.data + r * w.row_bytes, w.cols, x, 1, w.cols, ys[i] + r, w.rows);
    }
  }
}

bool matmul_f16_decode(const Matrix& w, const float* x, float* y, int threads) {
  if (w.type != 1) return false;
  std::vector<uint16_t>& x16 = f16_scratch(static_cast<size_t>(w.cols));
  float back = 1.0f;
  if (!f16_decode_acts(x, w.cols, x16.data(), &back)) return false;
  const uint16_t* xp = x16.data();
#pragma omp parallel for num_threads(threads) schedule(static) if (w.rows * w.cols > 65536)
  for (int64_t r = 0; r < w.rows; ++r) y[r] = HWY_DYNAMIC_DISPATCH(F16ActRow)(w.data + r * w.row_bytes, w.cols, xp, back);
  return true;
}

void matmul_rows(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  // F32/F16/BF16/Q8_0/Q4_0 rows are decoded inside the SIMD dot; the other
  // block types are expanded row by row into a per-thread buffer first.
  const bool direct = w.type == 0 || w.type == 1 || w.type == 30 || w.type == 8 || w.type == 2;
#pragma omp parallel num_threads(threads) if (w.rows * w.cols > 65536)
  {
    std::vector<float> buf(direct ? 0 : w.cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      if (direct) {
        HWY_DYNAMIC_DISPATCH(RowDots)(w.type, w.data + r * w.row_bytes, w.cols, x, n_tok, w.cols, y + r, w.rows);
      } else {
        unpack_f32(w.type, w.data + r * w.row_bytes, 0, w.cols, buf.data());
        HWY_DYNAMIC_DISPATCH(RowDots)(0, reinterpret_cast<const uint8_t*>(buf.data()), w.cols, x, n_tok, w.cols, y + r,
                                      w.rows);
      }
    }
  }
}

void dequantize_row(const Matrix& w, int64_t r, float* out) {
  unpack_f32(w.type, w.data + r * w.row_bytes, 0, w.cols, out);
}

}  // namespace tkv
#endif
