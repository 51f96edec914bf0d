// The int8-activation prefill core (matmul_tiled.h): activations quantized
// per block of 32 (Q8_0-like, quantize_activations_q8), each panel of 32
// weight rows unpacked once to unsigned 8-bit codes with a scale and an
// offset per block (per half-block of 16 for Q6_K), exact integer dot
// products, then one scale step per block.
//
// Two kernels, one arithmetic: AVX512-VNNI (vpdpbusd: 4 byte products summed
// into a dword, 16 rows per vector) and AVX2 (vpmaddubsw: byte products
// summed in pairs into words, then vpmaddwd by ones into dwords, 8 rows per
// vector). Both form the same exact int32 sums and then take the same float
// steps per lane, so they give the bits of matmul_int8_ref (the scalar
// specification) alike. Highway 1.0.3 (Debian 12) exposes neither
// instruction, so both are intrinsics, chosen at run time (int8_kernel).
//
// vpmaddubsw saturates its word sums: two products of a code u and an
// activation |q| <= 127 stay below 32767 only while u <= 128. Every type's
// codes do (<= 63) except Q8_0's u = q + 128; the AVX2 kernel takes Q8_0's
// signed q and the activation with q's sign (|q| <= 128), the llama.cpp
// trick, and adds 128 Σ q_x back to the dword sum, which is then the same
// integer vpdpbusd forms.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <hwy/aligned_allocator.h>
#include <hwy/targets.h>

#include "matmul/matmul_tiled.h"
#include "matmul/transpose16.h"
#include "gguf/weight_blocks.h"
#include "util/fp16.h"
#include "util/simd_targets.h"

#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
// GCC 12's avx512fintrin.h starts _mm512_cvtepi32_ps from `__m512 __Y = __Y;`
// (an undefined vector it then masks away) and warns that __Y may be used
// uninitialized once the call is inlined after a vpsubd (the Q6_K step).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define TKV_X86_INT8 1
#define TKV_VNNI_ATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define TKV_AVX2_ATTR __attribute__((target("avx2,fma")))
#endif

namespace tkv {
namespace {

constexpr uint32_t kQ8_0 = 8, kQ6_K = 14;
constexpr int kR8 = 32;  // rows per panel: two VNNI vectors of 16 dword lanes, four AVX2 vectors of 8
constexpr int kNT8 = 4;  // tokens per VNNI tile (8 int32 + 8 f32 accumulators; 6 measured no faster)
constexpr int kNT2 = 2;  // tokens per AVX2 tile of 16 rows (4 + 4 accumulators of AVX2's 16 registers)

enum class Int8Kernel { kNone, kAvx2, kVnni };

// Follows simd_force_target: each kernel runs only while dispatch may pick a
// target with its instructions, so tests reach both on one machine.
Int8Kernel int8_kernel() {
#ifdef TKV_X86_INT8
  const int64_t t = simd_supported_targets();
  if ((t & (HWY_AVX3 | HWY_AVX3_DL)) != 0 && __builtin_cpu_supports("avx512vnni")) return Int8Kernel::kVnni;
  if ((t & (HWY_AVX2 | HWY_AVX3 | HWY_AVX3_DL)) != 0 && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma"))
    return Int8Kernel::kAvx2;
#endif
  return Int8Kernel::kNone;
}

struct QuantizedActs {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> hs;  // Σ q over each half-block of 16: [token][2 nb]
  int64_t nb = 0;
};

// simd: the Highway quantizer, else the scalar specification (same bits).
QuantizedActs quantize_all(const float* x, int n_tok, int64_t cols, int threads, bool simd) {
  QuantizedActs a;
  a.nb = cols / 32;
  a.q.resize(static_cast<size_t>(n_tok) * cols);
  a.d.resize(static_cast<size_t>(n_tok) * a.nb);
  a.s.resize(a.d.size());
  a.hs.resize(2 * a.d.size());
#pragma omp parallel for num_threads(threads) schedule(static) if (n_tok * cols > 65536)
  for (int t = 0; t < n_tok; ++t) {
    int8_t* q = &a.q[t * cols];
    if (simd) {
      quantize_activations_q8_simd(x + t * cols, cols, q, &a.d[t * a.nb], &a.s[t * a.nb]);
    } else {
      quantize_activations_q8(x + t * cols, cols, q, &a.d[t * a.nb], &a.s[t * a.nb]);
    }
    for (int64_t h = 0; h < 2 * a.nb; ++h) {
      int32_t sum = 0;
      for (int k = 0; k < 16; ++k) sum += q[h * 16 + k];
      a.hs[t * 2 * a.nb + h] = sum;
    }
  }
  return a;
}

// A panel of kR8 rows, all columns: per block j, 8 groups of 4 columns, each
// group 128 bytes whose dword i holds row i's 4 codes (the operand layout of
// vpdpbusd, 64 bytes per 16 rows; AVX2 reads it as four 32-byte vectors of 8
// rows); then the rows' scales and offsets per block ([j][row]), or for
// Q6_K the scales per half-block ([2 j + half][row]) and no offsets.
struct PackedPanel {
  PackedPanel(int64_t nb, bool q6)
      : q(hwy::AllocateAligned<uint8_t>(static_cast<size_t>(nb * 32 * kR8))),
        d(hwy::AllocateAligned<float>(static_cast<size_t>(nb * kR8 * (q6 ? 2 : 1)))),
        m(hwy::AllocateAligned<float>(static_cast<size_t>(nb * kR8))),
        n_d(nb * kR8 * (q6 ? 2 : 1)) {}
  hwy::AlignedFreeUniquePtr<uint8_t[]> q;
  hwy::AlignedFreeUniquePtr<float[]> d, m;
  int64_t n_d;
};

void pack_panel(const Matrix& w, int64_t r0, int64_t nr, PackedPanel& p) {
  const int64_t nb = w.cols / 32;
  const bool q6 = w.type == kQ6_K;
  if (nr < kR8) {  // rows past the matrix: codes, scales and offsets 0
    std::memset(p.q.get(), 0, static_cast<size_t>(nb * 32 * kR8));
    std::memset(p.d.get(), 0, sizeof(float) * p.n_d);
    std::memset(p.m.get(), 0, sizeof(float) * nb * kR8);
  }
  uint8_t u[32];
  for (int64_t i = 0; i < nr; ++i) {
    const uint8_t* row = w.data + (r0 + i) * w.row_bytes;
    for (int64_t j = 0; j < nb; ++j) {
      if (q6) {
        float d2[2];
        unpack_q6k_u8(row, j, u, d2);
        p.d[(2 * j) * kR8 + i] = d2[0];
        p.d[(2 * j + 1) * kR8 + i] = d2[1];
      } else {
        unpack_u8(w.type, row, j, u, &p.d[j * kR8 + i], &p.m[j * kR8 + i]);
      }
      uint8_t* dst = &p.q[j * 32 * kR8 + (i / 16) * 64 + (i % 16) * 4];
      for (int g = 0; g < 8; ++g) std::memcpy(dst + g * 128, u + 4 * g, 4);
    }
  }
}

int32_t load_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#ifdef TKV_X86_INT8
// Q4_0, Q8_0 and Q4_K panels with AVX-512: each row's codes of blocks j and
// j + 1 in one vector (unpack_u8's codes: Q4_0's nibbles low then high,
// Q8_0's q + 128, Q4_K's sub-block nibbles), 16 rows transposed as dwords
// into the 16 groups of 4 columns pack_panel writes, the scales from
// unpack_u8_scales. pack_panel's bytes (the int8 tests compare the results
// with matmul_int8_ref bit for bit); it took 15 % of a 512-token Q4_0
// product with unpack_u8 per block and 8 scattered copies of 4 bytes.
bool fast_pack(uint32_t type) { return type == 2 || type == 8 || type == 12; }

TKV_VNNI_ATTR __m256i codes32(uint32_t type, const uint8_t* row, int64_t j) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  if (type == 8) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j * 34 + 2));
    return _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  if (type == 2) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + j * 18 + 2));
    const __m128i lo = _mm_and_si128(q, _mm256_castsi256_si128(low));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm256_castsi256_si128(low));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  }
  const int sub = static_cast<int>(j % 8);  // Q4_K
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + (j / 8) * 144 + 16 + 32 * (sub / 2)));
  return _mm256_and_si256(sub & 1 ? _mm256_srli_epi16(q, 4) : q, low);
}

TKV_VNNI_ATTR void pack_panel_fast(const Matrix& w, int64_t r0, int64_t nr, PackedPanel& p) {
  const int64_t nb = w.cols / 32;
  if (nr < kR8) {
    std::memset(p.d.get(), 0, sizeof(float) * p.n_d);
    std::memset(p.m.get(), 0, sizeof(float) * nb * kR8);
  }
  for (int64_t i = 0; i < nr; ++i) {
    const uint8_t* row = w.data + (r0 + i) * w.row_bytes;
    if (w.type == 12) {  // per super-block (unpack_u8_scales per block: 3.4 % of a Q4_K pp512)
      for (int64_t j = 0; j < nb; j += 8) {
        float d8[8], m8[8];
        unpack_k4_scales8(row + (j / 8) * 144, d8, m8);
        for (int s = 0; s < 8 && j + s < nb; ++s) {
          p.d[(j + s) * kR8 + i] = d8[s];
          p.m[(j + s) * kR8 + i] = m8[s];
        }
      }
      continue;
    }
    // Q4_0 and Q8_0: unpack_u8_scales' d (the f16 scale, exactly) and m,
    // without its call per block (4.6 % of the product).
    const int bytes = weight_block_bytes(w.type);
    const float mul = u8_offset_per_scale(w.type);
    for (int64_t j = 0; j < nb; ++j) {
      uint16_t h;
      std::memcpy(&h, row + j * bytes, 2);
      const float d = _cvtsh_ss(h);
      p.d[j * kR8 + i] = d;
      p.m[j * kR8 + i] = mul * d;
    }
  }
  for (int hp = 0; hp < 2; ++hp)
    for (int64_t j = 0; j < nb; j += 2) {
      const bool two = j + 1 < nb;
      __m512i r[16];
      for (int e = 0; e < 16; ++e) {
        const int64_t i = hp * 16 + e;
        if (i >= nr) {
          r[e] = _mm512_setzero_si512();
          continue;
        }
        const uint8_t* row = w.data + (r0 + i) * w.row_bytes;
        const __m256i hi = two ? codes32(w.type, row, j + 1) : _mm256_setzero_si256();
        r[e] = _mm512_inserti64x4(_mm512_castsi256_si512(codes32(w.type, row, j)), hi, 1);
      }
      transpose16_epi32(r);  // r[g]: group g of block j, r[8 + g]: of block j + 1
      for (int g = 0; g < 8; ++g) {
        _mm512_store_si512(p.q.get() + j * 32 * kR8 + g * 128 + hp * 64, r[g]);
        if (two) _mm512_store_si512(p.q.get() + (j + 1) * 32 * kR8 + g * 128 + hp * 64, r[8 + g]);
      }
    }
}

// NT tokens x the panel's 32 rows. Per block j and part (the whole block, or
// Q6_K's two halves) the int32 dot of every row is completed, then
//   plain: f = fma(float(dot), d_w * d_x, f); f = fma(m_w, s_x, f)
//   Q6_K:  f = fma(float(dot - 32 Σ q_x), d_half * d_x, f)
template <int NT, bool kQ6>
TKV_VNNI_ATTR void tile_vnni(const PackedPanel& p, int64_t nb, const QuantizedActs& a, int64_t cols, int t0,
                             float* out) {
  constexpr int kParts = kQ6 ? 2 : 1, kGroups = 8 / kParts;
  __m512 f[2][NT];
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < NT; ++t) f[h][t] = _mm512_setzero_ps();
  const int8_t* xq = a.q.data() + t0 * cols;
  const float* xd = a.d.data() + t0 * nb;
  const float* xs = a.s.data() + t0 * nb;
  const int32_t* hs = a.hs.data() + t0 * 2 * nb;
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* wj = p.q.get() + j * 32 * kR8;
    for (int part = 0; part < kParts; ++part) {
      __m512i acc[2][NT];
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < NT; ++t) acc[h][t] = _mm512_setzero_si512();
      for (int g = part * kGroups; g < (part + 1) * kGroups; ++g) {
        const __m512i w0 = _mm512_load_si512(wj + g * 128), w1 = _mm512_load_si512(wj + g * 128 + 64);
        for (int t = 0; t < NT; ++t) {
          const __m512i xb = _mm512_set1_epi32(load_dword(xq + t * cols + j * 32 + g * 4));
          acc[0][t] = _mm512_dpbusd_epi32(acc[0][t], w0, xb);
          acc[1][t] = _mm512_dpbusd_epi32(acc[1][t], w1, xb);
        }
      }
      for (int h = 0; h < 2; ++h) {
        if (kQ6) {
          const __m512 d = _mm512_load_ps(p.d.get() + (2 * j + part) * kR8 + h * 16);
          for (int t = 0; t < NT; ++t) {
            const __m512i dot = _mm512_sub_epi32(acc[h][t], _mm512_set1_epi32(32 * hs[t * 2 * nb + 2 * j + part]));
            const __m512 sc = _mm512_mul_ps(d, _mm512_set1_ps(xd[t * nb + j]));
            f[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, f[h][t]);
          }
        } else {
          const __m512 d = _mm512_load_ps(p.d.get() + j * kR8 + h * 16);
          const __m512 m = _mm512_load_ps(p.m.get() + j * kR8 + h * 16);
          for (int t = 0; t < NT; ++t) {
            const __m512 sc = _mm512_mul_ps(d, _mm512_set1_ps(xd[t * nb + j]));
            f[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][t]), sc, f[h][t]);
            f[h][t] = _mm512_fmadd_ps(m, _mm512_set1_ps(xs[t * nb + j]), f[h][t]);
          }
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int h = 0; h < 2; ++h) _mm512_storeu_ps(out + t * kR8 + h * 16, f[h][t]);
}

// The same for the 16 rows 16 hp .. 16 hp + 15 of the panel with AVX2, as
// two vectors of 8 rows. kWide: Q8_0 (see the top of the file).
template <int NT, bool kQ6, bool kWide>
TKV_AVX2_ATTR void tile_avx2(const PackedPanel& p, int64_t nb, const QuantizedActs& a, int64_t cols, int t0, int hp,
                             float* out) {
  constexpr int kParts = kQ6 ? 2 : 1, kGroups = 8 / kParts;
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 f[2][NT];
  for (int v = 0; v < 2; ++v)
    for (int t = 0; t < NT; ++t) f[v][t] = _mm256_setzero_ps();
  const int8_t* xq = a.q.data() + t0 * cols;
  const float* xd = a.d.data() + t0 * nb;
  const float* xs = a.s.data() + t0 * nb;
  const int32_t* hs = a.hs.data() + t0 * 2 * nb;
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* wj = p.q.get() + j * 32 * kR8 + hp * 64;
    for (int part = 0; part < kParts; ++part) {
      __m256i acc[2][NT];
      for (int v = 0; v < 2; ++v)
        for (int t = 0; t < NT; ++t) acc[v][t] = _mm256_setzero_si256();
      if (kWide) {
        for (int g = part * kGroups; g < (part + 1) * kGroups; ++g) {
          __m256i aw[2], ws[2];  // |q| and signed q
          for (int v = 0; v < 2; ++v) {
            ws[v] = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(wj + g * 128 + v * 32)), flip);
            aw[v] = _mm256_sign_epi8(ws[v], ws[v]);
          }
          for (int t = 0; t < NT; ++t) {
            const __m256i xb = _mm256_set1_epi32(load_dword(xq + t * cols + j * 32 + g * 4));
            for (int v = 0; v < 2; ++v) {
              const __m256i pairs = _mm256_maddubs_epi16(aw[v], _mm256_sign_epi8(xb, ws[v]));
              acc[v][t] = _mm256_add_epi32(acc[v][t], _mm256_madd_epi16(pairs, ones));
            }
          }
        }
      } else {
        // Codes <= 63: two groups' word sums (each |.| <= 2 * 63 * 127) add
        // without overflow before one vpmaddwd, 5 operations per 2 x 32 bytes
        // instead of 6.
        for (int g = part * kGroups; g < (part + 1) * kGroups; g += 2) {
          __m256i w[2][2];
          for (int v = 0; v < 2; ++v)
            for (int e = 0; e < 2; ++e)
              w[e][v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(wj + (g + e) * 128 + v * 32));
          for (int t = 0; t < NT; ++t) {
            const __m256i x0 = _mm256_set1_epi32(load_dword(xq + t * cols + j * 32 + g * 4));
            const __m256i x1 = _mm256_set1_epi32(load_dword(xq + t * cols + j * 32 + g * 4 + 4));
            for (int v = 0; v < 2; ++v) {
              const __m256i words = _mm256_add_epi16(_mm256_maddubs_epi16(w[0][v], x0), _mm256_maddubs_epi16(w[1][v], x1));
              acc[v][t] = _mm256_add_epi32(acc[v][t], _mm256_madd_epi16(words, ones));
            }
          }
        }
      }
      for (int v = 0; v < 2; ++v) {
        const int64_t r = hp * 16 + v * 8;
        if (kQ6) {
          const __m256 d = _mm256_load_ps(p.d.get() + (2 * j + part) * kR8 + r);
          for (int t = 0; t < NT; ++t) {
            const __m256i dot = _mm256_sub_epi32(acc[v][t], _mm256_set1_epi32(32 * hs[t * 2 * nb + 2 * j + part]));
            const __m256 sc = _mm256_mul_ps(d, _mm256_set1_ps(xd[t * nb + j]));
            f[v][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, f[v][t]);
          }
        } else {
          const __m256 d = _mm256_load_ps(p.d.get() + j * kR8 + r);
          const __m256 m = _mm256_load_ps(p.m.get() + j * kR8 + r);
          for (int t = 0; t < NT; ++t) {
            __m256i dot = acc[v][t];
            if (kWide) {  // Σ q_w q_x + 128 Σ q_x = Σ (q_w + 128) q_x, vpdpbusd's sum
              const int32_t qsum = hs[t * 2 * nb + 2 * j] + hs[t * 2 * nb + 2 * j + 1];
              dot = _mm256_add_epi32(dot, _mm256_set1_epi32(128 * qsum));
            }
            const __m256 sc = _mm256_mul_ps(d, _mm256_set1_ps(xd[t * nb + j]));
            f[v][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), sc, f[v][t]);
            f[v][t] = _mm256_fmadd_ps(m, _mm256_set1_ps(xs[t * nb + j]), f[v][t]);
          }
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int v = 0; v < 2; ++v) _mm256_storeu_ps(out + t * kR8 + hp * 16 + v * 8, f[v][t]);
}

// One tile of nt tokens (1 .. the kernel's tokens per tile) into out[t][row].
template <bool kQ6>
void tile_vnni_n(int nt, const PackedPanel& p, int64_t nb, const QuantizedActs& a, int64_t cols, int t0, float* out) {
  switch (nt) {
    case 1: return tile_vnni<1, kQ6>(p, nb, a, cols, t0, out);
    case 2: return tile_vnni<2, kQ6>(p, nb, a, cols, t0, out);
    case 3: return tile_vnni<3, kQ6>(p, nb, a, cols, t0, out);
    default: return tile_vnni<4, kQ6>(p, nb, a, cols, t0, out);
  }
}

template <bool kQ6, bool kWide>
void tile_avx2_n(int nt, const PackedPanel& p, int64_t nb, const QuantizedActs& a, int64_t cols, int t0, float* out) {
  for (int hp = 0; hp < 2; ++hp) {
    if (nt == 1) tile_avx2<1, kQ6, kWide>(p, nb, a, cols, t0, hp, out);
    else tile_avx2<2, kQ6, kWide>(p, nb, a, cols, t0, hp, out);
  }
}

void run_tile(Int8Kernel k, uint32_t type, int nt, const PackedPanel& p, int64_t nb, const QuantizedActs& a,
              int64_t cols, int t0, float* out) {
  const bool q6 = type == kQ6_K;
  if (k == Int8Kernel::kVnni) {
    if (q6) tile_vnni_n<true>(nt, p, nb, a, cols, t0, out);
    else tile_vnni_n<false>(nt, p, nb, a, cols, t0, out);
  } else if (q6) {
    tile_avx2_n<true, false>(nt, p, nb, a, cols, t0, out);
  } else if (type == kQ8_0) {
    tile_avx2_n<false, true>(nt, p, nb, a, cols, t0, out);
  } else {
    tile_avx2_n<false, false>(nt, p, nb, a, cols, t0, out);
  }
}
#endif

}  // namespace

bool int8_core_available() { return int8_kernel() != Int8Kernel::kNone; }

bool int8_supports(uint32_t type) { return has_u8_unpack(type) || type == kQ6_K; }

bool matmul_int8(const Matrix& w, const float* x, int n_tok, float* y, int threads) {
  const Int8Kernel kernel = int8_kernel();
  if (kernel == Int8Kernel::kNone || !int8_supports(w.type) || w.cols % 32 != 0) return false;
#ifdef TKV_X86_INT8
  const QuantizedActs a = quantize_all(x, n_tok, w.cols, threads, true);
  const int64_t nb = a.nb, n_panels = (w.rows + kR8 - 1) / kR8;
  const int tile_tokens = kernel == Int8Kernel::kVnni ? kNT8 : kNT2;
#pragma omp parallel num_threads(threads) if (w.rows * w.cols > 65536)
  {
    PackedPanel p(nb, w.type == kQ6_K);
    alignas(64) float out[kR8 * kNT8];
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < n_panels; ++pi) {
      const int64_t r0 = pi * kR8, nr = std::min<int64_t>(kR8, w.rows - r0);
#ifdef TKV_X86_INT8
      if (kernel == Int8Kernel::kVnni && fast_pack(w.type)) pack_panel_fast(w, r0, nr, p);
      else
#endif
        pack_panel(w, r0, nr, p);
      for (int t0 = 0; t0 < n_tok; t0 += tile_tokens) {
        const int nt = std::min(tile_tokens, n_tok - t0);
        run_tile(kernel, w.type, nt, p, nb, a, w.cols, t0, out);
        for (int t = 0; t < nt; ++t) std::memcpy(y + (t0 + t) * w.rows + r0, out + t * kR8, sizeof(float) * nr);
      }
    }
  }
  return true;
#else
  return false;
#endif
}

void matmul_int8_ref(const Matrix& w, const float* x, int n_tok, float* y) {
  const QuantizedActs a = quantize_all(x, n_tok, w.cols, 1, false);
  const int64_t nb = a.nb;
  const bool q6 = w.type == kQ6_K;
  std::vector<uint8_t> u(static_cast<size_t>(w.cols));
  std::vector<float> d(2 * nb), m(nb);
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes;
    for (int64_t j = 0; j < nb; ++j) {
      if (q6) unpack_q6k_u8(row, j, &u[j * 32], &d[2 * j]);
      else unpack_u8(w.type, row, j, &u[j * 32], &d[j], &m[j]);
    }
    for (int t = 0; t < n_tok; ++t) {
      const int8_t* q = &a.q[t * w.cols];
      float f = 0.0f;
      for (int64_t j = 0; j < nb; ++j) {
        const float dx = a.d[t * nb + j];
        if (q6) {
          for (int h = 0; h < 2; ++h) {
            int32_t dot = 0;
            for (int k = h * 16; k < h * 16 + 16; ++k) dot += u[j * 32 + k] * q[j * 32 + k];
            dot -= 32 * a.hs[t * 2 * nb + 2 * j + h];
            f = std::fma(static_cast<float>(dot), d[2 * j + h] * dx, f);
          }
        } else {
          int32_t dot = 0;
          for (int k = 0; k < 32; ++k) dot += u[j * 32 + k] * q[j * 32 + k];
          f = std::fma(static_cast<float>(dot), d[j] * dx, f);
          f = std::fma(m[j], a.s[t * nb + j], f);
        }
      }
      y[t * w.rows + r] = f;
    }
  }
}

}  // namespace tkv
