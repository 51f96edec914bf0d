// The cost of reading a 64-row block's 16-bit row scales (RESULTS §47): rows
// 34 bytes apart (tq2, d 128), the block in L1, ns and cycles a block for
//   mode 0: 4 vpgatherdd of 16 (BlockScales before §47)
//   mode 1: 64 scalar loads stored as dwords, 4 vector loads (BlockScales now)
//   mode 2: scalar loads put into vectors by inserts (the AVX2 path's way)
//   mode 3: 4 scales a qword in a register, stored, widened by vpmovzxwd
//   mode 4: stored as words, widened by vpmovzxwd
//   mode 5: 16-byte masked broadcasts of 4 rows a vector, vpermt2w (RESULTS §51)
//   mode 6: 4 scales a qword in a register, put into a vector by vmovq/vpinsrq
//   mode 7: eight vpinsrw from memory a vector, widened by vpmovzxwd (BlockScales on AVX-512 since §51)
//   g++ -O2 -mavx512f -mavx512bw -mavx512vl -mavx512dq scripts/harness/gather_scales.cpp -o /tmp/gs && /tmp/gs
// (cycles assume 3.67 GHz, the Zen 4 EPYC of §47.)
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
alignas(64) uint8_t buf[64*34*2+64];
alignas(64) float out[64];
int main() {
  for (int i=0;i<(int)sizeof(buf);i++) buf[i]=i*7;
  const __m512i idx = _mm512_setr_epi32(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15);
  const __m512i stride = _mm512_set1_epi32(34);
  const long N = 20000000;
  for (int mode=0; mode<8; ++mode) {
    auto t0 = std::chrono::steady_clock::now();
    __m512 acc = _mm512_setzero_ps();
    for (long it=0; it<N; ++it) {
      const uint8_t* p0 = buf + (it & 1) * 2;
      if (mode==0) {
        for (int i=0;i<64;i+=16) {
          __m512i off = _mm512_mullo_epi32(_mm512_add_epi32(idx,_mm512_set1_epi32(i)), stride);
          __m512i g = _mm512_i32gather_epi32(off, (const int*)p0, 1);
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_and_si512(g,_mm512_set1_epi32(0xffff))));
        }
      } else if (mode==1) {
        alignas(64) uint32_t c[64];
        for (int i=0;i<64;i++) { uint16_t h; memcpy(&h, p0 + i*34, 2); c[i]=h; }
        for (int i=0;i<64;i+=16) acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_load_si512(c+i)));
      } else if (mode==3) {
        alignas(64) uint64_t c[16];
        for (int i=0;i<64;i+=4) { uint16_t h0,h1,h2,h3; memcpy(&h0,p0+i*34,2); memcpy(&h1,p0+(i+1)*34,2); memcpy(&h2,p0+(i+2)*34,2); memcpy(&h3,p0+(i+3)*34,2);
          c[i/4] = (uint64_t)h0 | ((uint64_t)h1<<16) | ((uint64_t)h2<<32) | ((uint64_t)h3<<48); }
        for (int i=0;i<64;i+=16) acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i*)(c+i/4)))));
      } else if (mode==4) {
        alignas(64) uint16_t c[64];
        for (int i=0;i<64;i++) memcpy(&c[i], p0 + i*34, 2);
        for (int i=0;i<64;i+=16) acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i*)(c+i)))));
      } else if (mode==5) {
        alignas(64) static const uint16_t selw[32]={0,8,16,24,32,40,48,56}; const __m512i sel=_mm512_load_si512(selw);
        for (int i=0;i<64;i+=16) {
          __m512i v[4];
          for (int k=0;k<4;k++) {
            __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(p0+(i+4*k)*34)));
            z = _mm512_mask_broadcast_i32x4(z, 0x00F0, _mm_loadu_si128((const __m128i*)(p0+(i+4*k+1)*34)));
            z = _mm512_mask_broadcast_i32x4(z, 0x0F00, _mm_loadu_si128((const __m128i*)(p0+(i+4*k+2)*34)));
            z = _mm512_mask_broadcast_i32x4(z, 0xF000, _mm_loadu_si128((const __m128i*)(p0+(i+4*k+3)*34)));
            v[k]=z;
          }
          __m512i a = _mm512_permutex2var_epi16(v[0], sel, v[1]);
          __m512i b = _mm512_permutex2var_epi16(v[2], sel, v[3]);
          __m256i w = _mm256_inserti128_si256(_mm512_castsi512_si256(a), _mm512_castsi512_si128(b), 1);
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_cvtepu16_epi32(w)));
        }
      } else if (mode==6) {
        for (int i=0;i<64;i+=16) {
          uint64_t q[4];
          for (int k=0;k<4;k++) { uint16_t h0,h1,h2,h3; memcpy(&h0,p0+(i+4*k)*34,2); memcpy(&h1,p0+(i+4*k+1)*34,2); memcpy(&h2,p0+(i+4*k+2)*34,2); memcpy(&h3,p0+(i+4*k+3)*34,2);
            q[k] = (uint64_t)h0 | ((uint64_t)h1<<16) | ((uint64_t)h2<<32) | ((uint64_t)h3<<48); }
          __m128i lo = _mm_insert_epi64(_mm_cvtsi64_si128(q[0]), q[1], 1), hi = _mm_insert_epi64(_mm_cvtsi64_si128(q[2]), q[3], 1);
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1))));
        }
      } else if (mode==7) {
        for (int i=0;i<64;i+=16) {
          __m128i v[2];
          for (int k=0;k<2;k++) { __m128i x = _mm_setzero_si128();
            uint16_t h;
#define INS(j) memcpy(&h,p0+(i+8*k+j)*34,2); x = _mm_insert_epi16(x, h, j);
            INS(0) INS(1) INS(2) INS(3) INS(4) INS(5) INS(6) INS(7)
            v[k]=x; }
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_inserti128_si256(_mm256_castsi128_si256(v[0]), v[1], 1))));
        }
      } else {
        for (int i=0;i<64;i+=16) {
          __m128i v[4];
          for (int k=0;k<4;k++) {
            uint16_t h0,h1,h2,h3; memcpy(&h0,p0+(i+4*k)*34,2); memcpy(&h1,p0+(i+4*k+1)*34,2); memcpy(&h2,p0+(i+4*k+2)*34,2); memcpy(&h3,p0+(i+4*k+3)*34,2);
            v[k] = _mm_setr_epi32(h0,h1,h2,h3);
          }
          __m512i z = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(v[0]),v[1],1),v[2],2),v[3],3);
          acc = _mm512_add_ps(acc, _mm512_castsi512_ps(z));
        }
      }
      asm volatile("" :: "v"(acc) : "memory");
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    _mm512_store_ps(out, acc);
    printf("mode %d: %.2f ns per 64 rows = %.1f cycles (3.67GHz)\n", mode, s/N*1e9, s/N*1e9*3.67);
  }
}
