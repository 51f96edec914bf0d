// AMX keys prototype (RESULTS §37): tq3, d 128, 4 queries, 32-row blocks of 4096 rows in cache. Stages each
// row's centroid bytes in the query order (vpsrlvw, vpmultishiftqb, vpternlogd, vpermb, a store a chunk), the
// queries as B tiles, TDPBUSD into C; checks the integers against int8_dots_ordered (the lane kernel) and
// times, in ns a row: the lane kernel, the staging alone, staging + tiles, with B loaded once, the tiles
// alone, and with ldtilecfg + tilerelease around every block. Build after the Release build:
//   g++ -O2 -std=c++20 scripts/harness/amx_keys.cpp -o /tmp/amx_keys -I build/layers/tkv_attention -I src \
//       -I build -Lbuild -ltkv_attention -ltkv_codec -ltkv_util -lhwy -lxxhash -fopenmp
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "attention/score_int8.h"
#include "codec/format.h"
#include "codec/kernels.h"
using namespace tkv;
static double cpu() { timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
struct alignas(64) TileConfig { uint8_t palette = 1, start_row = 0; uint8_t reserved[14] = {}; uint16_t colsb[16] = {}; uint8_t rows[16] = {}; };
#define TL(t, base, stride) asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define TS(t, base, stride) asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define TZ(t) asm volatile("tilezero %%tmm" #t ::: "memory")
#define TD(c, a, b) asm volatile("tdpbusd %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")
#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni,avx512dq")))
ATTR static void stage(const uint8_t* const* rows, size_t off0, size_t off1, const uint8_t* tab, uint8_t* A) {
  const __m512i t = _mm512_loadu_si512(tab);
  const __m512i sh = _mm512_set_epi64(6*0x0001000100010001ll, 6*0x0001000100010001ll, 4*0x0001000100010001ll, 4*0x0001000100010001ll, 2*0x0001000100010001ll, 2*0x0001000100010001ll, 0, 0);
  alignas(64) uint8_t c8[64]; for (int p = 0; p < 64; ++p) c8[p] = (4 * (p % 16) + p / 16 - 2) & 63;
  const __m512i ctrl = _mm512_load_si512(c8), low2 = _mm512_set1_epi8(3);
  for (int r = 0; r < 32; ++r) {
    for (int c = 0; c < 2; ++c) {
      __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(rows[r] + off0 + 16 * c)));
      __m512i code = _mm512_srlv_epi16(z, sh);
      __m512i h = _mm512_set1_epi64(*(const long long*)(rows[r] + off1 + 8 * c));
      code = _mm512_ternarylogic_epi32(code, _mm512_multishift_epi64_epi8(ctrl, h), low2, 0xE4);
      _mm512_store_si512(A + r * 128 + 64 * c, _mm512_permutexvar_epi8(code, t));
    }
  }
}
int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023, 18);
  int d = 128, n = 4096, G = 4, dp = 128;
  auto c = make_codec("tq3", d); const Codec& C = **c;
  std::mt19937 rng(1); std::normal_distribution<float> N(0, 1);
  std::vector<float> x(size_t(n) * d); for (auto& v : x) v = N(rng);
  std::vector<uint8_t> K(size_t(n) * C.row_bytes()); (void)C.quantize(x.data(), n, K.data());
  attn::Int8Keys k; attn::int8_keys_prepare(C.layout(), d, dp, nullptr, k);
  const RowLayout& L = C.layout();
  printf("lanes_dots %d nplanes %d off %zu %zu rb %zu\n", k.lanes_dots, L.parts[0].nplanes, (size_t)L.parts[0].planes[0].offset, (size_t)L.parts[0].planes[1].offset, C.row_bytes());
  std::vector<int8_t> q8(G * dp); for (auto& v : q8) v = int8_t(int(N(rng) * 40) % 127);
  std::vector<const uint8_t*> rows(n); for (int i = 0; i < n; ++i) rows[i] = K.data() + size_t(i) * C.row_bytes();
  // B tiles: chunk c: [16 k4][4 n][4 i] = q8[n][64c + 4k4 + i]
  alignas(64) int8_t B[2][16][16];
  for (int cc = 0; cc < 2; ++cc) for (int k4 = 0; k4 < 16; ++k4) for (int nn = 0; nn < 4; ++nn) for (int i = 0; i < 4; ++i) B[cc][k4][nn * 4 + i] = q8[nn * dp + 64 * cc + 4 * k4 + i];
  TileConfig cfg;
  cfg.rows[0] = 16; cfg.colsb[0] = 16; cfg.rows[1] = 16; cfg.colsb[1] = 16;  // C0 C1
  cfg.rows[2] = 16; cfg.colsb[2] = 16; cfg.rows[3] = 16; cfg.colsb[3] = 16;  // B0 B1
  for (int t = 4; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }       // A
  asm volatile("ldtilecfg %0" ::"m"(cfg));
  const int NB = 8;  // independent staging buffers
  alignas(64) static uint8_t A[NB][32 * 128];
  alignas(64) static int32_t Cout[NB][32][4];
  std::vector<int32_t> ref(G * 32), got(G * 32);
  const size_t off0 = L.parts[0].planes[0].offset, off1 = L.parts[0].planes[1].offset;
  // One 32-row block's products from staged rows a into c (B already in tiles 2-3).
  auto products = [&](const uint8_t* a, int32_t (*c)[4]) {
    TZ(0); TZ(1);
    TL(4, a, 128); TL(5, a + 64, 128); TL(6, a + 16 * 128, 128); TL(7, a + 16 * 128 + 64, 128);
    TD(0, 4, 2); TD(0, 5, 3); TD(1, 6, 2); TD(1, 7, 3);
    TS(0, c[0], 16); TS(1, c[16], 16);
  };
  auto load_b = [&] { TL(2, B[0], 16); TL(3, B[1], 16); };
  // check
  stage(rows.data(), off0, off1, k.lanes_table, A[0]);
  load_b();
  products(A[0], Cout[0]);
  attn::int8_dots_ordered(k, L, rows.data(), 32, q8.data(), G, ref.data(), 32);
  int bad = 0; for (int j = 0; j < G; ++j) for (int r = 0; r < 32; ++r) bad += ref[j * 32 + r] != Cout[0][r][j];
  printf("mismatches %d (ref %d got %d)\n", bad, ref[0], Cout[0][0][0]);
  // ns a row of 20 passes over the n rows, block(r0, slot) for each block.
  auto timed = [&](auto&& block) {
    const double t0 = cpu();
    for (int it = 0; it < 20; ++it) for (int r0 = 0; r0 < n; r0 += 32) block(r0, (r0 / 32) % NB);
    return (cpu() - t0) / (20.0 * n) * 1e9;
  };
  for (int rep = 0; rep < 5; ++rep) {
    asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
    const double tl = timed([&](int r0, int) { attn::int8_dots_ordered(k, L, rows.data() + r0, 32, q8.data(), G, got.data(), 32); });
    const double ts = timed([&](int r0, int i) { stage(rows.data() + r0, off0, off1, k.lanes_table, A[i]); });
    const double ta = timed([&](int r0, int i) {
      stage(rows.data() + r0, off0, off1, k.lanes_table, A[i]);
      load_b();
      products(A[i], Cout[i]);
    });
    load_b();
    const double tb = timed([&](int r0, int i) {
      stage(rows.data() + r0, off0, off1, k.lanes_table, A[i]);
      products(A[i], Cout[i]);
    });
    const double tt = timed([&](int, int i) { products(A[i], Cout[i]); });
    const double tc = timed([&](int r0, int i) {
      stage(rows.data() + r0, off0, off1, k.lanes_table, A[i]);
      asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
      load_b();
      products(A[i], Cout[i]);
      asm volatile("tilerelease" ::: "memory");
    });
    printf("ns/row: lanes %.2f  stage %.2f  stage+tiles %.2f  B once %.2f  tiles only %.2f  cfg each %.2f\n", tl, ts, ta, tb, tt, tc);
  }
  asm volatile("tilerelease");
}
