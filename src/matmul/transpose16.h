// A 16 x 16 transpose of dwords in 16 AVX-512 vectors, for the matmul
// kernels that turn rows of weights into the operand layouts of vpdpbusd
// and of the AMX tiles (matmul_amx.cpp, matmul_int8.cpp). Internal to matmul/.
#pragma once
#if defined(__x86_64__) && !defined(TKV_NO_VNNI)
#include <immintrin.h>

namespace tkv {

// r[i] dword p -> r[p] dword i: unpacks within 128-bit lanes, then a 4 x 4
// transpose of the lanes (64 shuffles; 16 scatters of 16 dwords took 8x as
// long, 28 % of an F16 product on AMX).
__attribute__((target("avx512f"))) inline void transpose16_epi32(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4 i + k], lane L: rows 4 i .. 4 i + 3, dword 4 L + k
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), v1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
    r[k] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + k] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}


}  // namespace tkv
#endif
