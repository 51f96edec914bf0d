// Key scoring on 8-bit integers (internal to attention/): tq rows' codes are
// turned into centroid bytes by an in-register table lookup (vpermb, 64
// entries a lookup; vpshufb, 32, on AVX2) and dotted with the query quantized
// to int8 (vpdpbusd, 64 products an instruction; vpmaddwd on words, 16, on
// AVX2, or vpmaddubsw on bytes, 32, where the centroid bytes are narrow),
// instead of decoding every code to a float and multiplying in f32. tq2 keys
// on AVX2 are scored by pair tables instead (Int8Keys::lut, Faiss's
// fast-scan: one vpshufb looks up two coordinates' products for 32 rows).
// The scalar functions here are the specification: the AVX-512 and AVX2
// kernels return the same integers, bit for bit.
//
// What it approximates (DESIGN.md 1.5: score = s_t · <q', c(code_t)>):
//   q'_i ≈ qs · q8_i,  q8_i = round(q'_i / qs), qs = max_i |q'_i| / 127
//   c_j  ≈ cs · c8_j,  c8_j = round(c_j / step), |c_j − cs · c8_j| <= cs/2, step and cs
//        fitted to the codebook (score_int8.cpp: least error, no gain), |c8_j| <= 127
//   score ≈ s_t · qs · cs · (Σ_i (c8_(code_i) + 128) · q8_i − 128 · Σ_i q8_i)
// (vpdpbusd multiplies unsigned by signed bytes, so centroid bytes carry +128.)
// The error is bounded per row by int8_score_bound(); measured against the
// codec's own score error in tests/attention/score_int8_test.cpp and RESULTS §27.
#pragma once
#include <cstddef>
#include <cstdint>

#include "codec/format.h"

namespace tkv::attn {

// Per-reader constants of the integer path (a tq / tqc layout).
struct Int8Keys {
  bool usable = false;   // a kTurbo layout this path reads (any d, any parts) within the error budget
  double predicted = 0;  // the added score error variance predicted, over the codec's own
  double value_share = 0;  // the centroid bytes' error variance over the codec's (V's measure, one unit;
                           // a V table above kInt8ValueMax is not usable)
  bool residual = false; // two bytes where one would add more than kInt8Residual: the query as
                         // qs·q8 + qs/254·r8 and the centroids as cs·c8 + cs/254·cr8
                         // (int8_residual_table); three dots a row instead of one
  bool wide = false;     // in place of residual bytes, where the layout is one 4-bit part and dp is 64,
                         // 128 or 256: centroids and query as 16-bit words (int8_dots16), one dot a row
  int wmax = 0;          // the words' largest magnitude: dp · wmax² < 2^31, so a whole dot fits int32
  float cs16 = 0.0f;     // centroid word scale (cmax / wmax)
  int16_t table16[16];   // c16_j = round(c_j / cs16), |c16_j| <= wmax
  bool aligned = false;  // every part starts and ends on a multiple of 64 coordinates and they cover dp:
                         // the kernel keeps each 64-coordinate chunk in registers (else it stages bytes)
  int d = 0, dp = 0;
  float cs = 0.0f;       // centroid scale (c_j ≈ cs · c8_j; score_int8.cpp fits it)
  float cmax = 0.0f;     // max |c_j| over the tables (for the bound)
  uint8_t table[RowLayout::kMaxParts][256];  // c8_j + 128 per part
  // The ordered AVX-512 kernels (score_int8.cpp): V on four rows' code
  // bytes side by side in the 128-bit lanes of one vector (values_lanes2;
  // tq4: rows in pairs, values_nib4), K on 16 rows transposed by dwords
  // (dots_t16: each row's dot in its own lane; the lane kernel at dp 64).
  // They read queries and write accumulators in a kernel order
  // (int8_query_order, int8_values_order). One part of 2-bit codes (+ a
  // 1-bit plane: tq2, tq3) over dp = 64, 128 or 256, or of 4-bit codes
  // (tq4) over dp = 128 or 256.
  // TKV_INT8_LANES=0 in the environment turns them off (for comparison).
  bool lanes_dots = false;
  bool lanes_values = false;
  uint8_t lanes_table[64];   // c8 + 128 of code x mod 2^bits (vpermb reads 6 index bits)
  uint8_t lanes_vtable[64];  // c8 (signed) likewise, for values
  // 2-bit codes (tq2, tq3): lookups4's two tables (score_int8.cpp), entry x
  // the code (x & 3) | bit 4 of x << 2 and ((x >> 2) & 3) | bit 5 of x << 2
  // (tq2: bits 4 and 5 ignored); lanes_t2 c8 + 128, lanes_vt2 c8.
  uint8_t lanes_t2[2][64];
  uint8_t lanes_vt2[2][64];
  // The AVX2 kernels' ordered decode (score_int8_avx2.cpp): one part over dp
  // (a multiple of 64, at most 1024) of 2-bit codes (+ a 1-bit plane: tq2,
  // tq3; avx2_sig 20, 21) or 4-bit codes (tq4; 40), else 0. A vpshufb reads
  // the plane bytes as they lie, so the codes come out in an order of their
  // own (int8_query_order); avx2_table is its two 16-byte tables (c8 + 128;
  // avx2_vtable: c8) for the two 128-bit lanes.
  int avx2_sig = 0;
  uint8_t avx2_table[32];
  uint8_t avx2_vtable[32];
  // AVX2's byte kernels (score_int8_avx2.cpp): without vpdpbusd, AVX2
  // multiplies bytes with vpmaddubsw, whose pair sums saturate at 16 bits;
  // with |c8| <= kNarrow the pair sums stay within 2·255·31 (V: weight bytes
  // times centroid bytes) or 2·63·127 (K: c8 + 32 times query bytes), so two
  // of them add on 16 bits before one widening, and half the multiplies of
  // the words (vpmaddwd) remain (RESULTS §39). Set by int8_keys_prepare
  // when AVX2 is the target, for avx2_sig 20 and 21 (tq2, tq3), where the
  // coarser centroid bytes still predict less than the residual threshold;
  // the table then holds those bytes, and every kernel and the
  // specification read them. avx2_ntable: avx2_table as c8 + 32.
  static constexpr int kNarrow = 31;
  bool narrow = false;
  uint8_t avx2_ntable[32];
  // V's bytes for tq4 on AVX2 (avx2_sig 40; int8_keys_prepare for
  // Int8Side::kValues): within ±kNarrowV, a weight byte pair times them
  // stays within 2·255·63 < 32767, so four rows' bytes side by side take one
  // vpmaddubsw and one vpmaddwd by ones per 8 positions where the words take
  // two vpmaddwd and two adds (values_quads, RESULTS §41). V has no query
  // bytes, so the centroid bytes' share alone (value_share: 0.004-0.006 of
  // the codec's variance at d 64-256) is held to kInt8ValueMax; K keeps
  // ±127.
  static constexpr int kNarrowV = 63;
  int bound = 127;  // the largest |c8| the table holds: kNarrow, kNarrowV or 127
  // Key scoring by pair tables (the fast-scan, RESULTS §42): one
  // part of 2-bit codes in one plane over dp (avx2_sig 20: tq2), AVX2 the
  // target, dp <= kLutMaxDp. A plane byte holds coordinates 4b .. 4b+3, so
  // each nibble is a pair (2P, 2P+1) of codes x = a | b << 2; per query and
  // pair a 16-entry table of q'_2P·c_a + q'_2P+1·c_b in bytes
  // (int8_lut_build) turns one vpshufb into 32 rows' partial scores, the
  // rows' plane bytes transposed per block of 32 in registers (the cache
  // keeps its row-major layout). lut_c: the part's 4 centroids;
  // lut_predicted: the tables' added score-error share (as `predicted`).
  // TKV_INT8_LUT=0 in the environment turns it off (comparisons; so does
  // TKV_INT8_LANES=0, which clears avx2_sig).
  bool lut = false;
  float lut_c[4] = {};
  double lut_predicted = 0;
  // V's pair tables (the "then V", RESULTS §43): the same layout
  // (avx2_sig 20, |c8| <= kNarrow, dp <= kLutMaxDp) prepared for V on AVX2.
  // The products w8 · c8 of int8_values are coarsened to one byte per row
  // and centroid, r = (w8 · c8 + 64) >> 7 (|r| <= 62), and per query and
  // pair of rows a 16-entry table r_a(x & 3) + r_b(x >> 2) turns one vpshufb
  // into 32 coordinates' sums of two rows: no multiply per row and
  // coordinate (the V kernels' vpmaddubsw run on Zen 1's one vector-multiply
  // pipe). vlut_predicted: r's rounding over the codec's error where every
  // row of a block weighs its maximum (d 64-512: 0.0004; one row at the
  // maximum and 31 at the rounding's scale: up to 32 times that). Held to
  // kInt8ValueMax. TKV_INT8_VLUT=0 in the environment turns it off.
  bool vlut = false;
  double vlut_predicted = 0;
};

// The pair tables' limit on dp: 32 rows' partial sums stay exact on 16 bits
// while dp/2 lookups of at most 255 do (dp/2 · 255 < 65536).
constexpr int kLutMaxDp = 512;

// Which side a table serves: K's tables price the query bytes too, V's not.
enum class Int8Side { kKeys, kValues };

// The budget: the integer path may add this fraction of the codec's own score
// error variance (0.03: its RMS grows by 1.5%; the limit is 2%).
// Formats above it (parts of 5 bits and more: tqc at high rates) keep f32.
constexpr double kInt8MaxPredicted = 0.03;
// Above this predicted share (one byte each), the query and the centroids get
// their residual bytes too (tq5 and up, tqc at high rates). 0.015: the score
// error's RMS grows by 0.75 %, 3/8 of the budget. tq4.5 predicts 0.009-0.012
// at d 64-256 with one byte (tq4 0.006); measured, its score error's RMS
// grows 0.5 % (synthetic, d 128) to 0.94 % (Qwen3.5 keys, d 256), and its
// ref-5m KLD 1.1 % (RESULTS §36, §41). (0.01 until §41, when the centroid
// term was understated by the coordinates' variance and the same choices
// read 0.005-0.007; it was 0.002 while the centroid bytes' gain, not their
// noise, made tq4's KLD grow 3.6 %: §27, §35.)
constexpr double kInt8Residual = 0.015;
// V's tables have no residual bytes: one whose centroid bytes add more than
// this share of the codec's error (value_share) keeps f32 (tq5: 0.014-0.016,
// its ref-5m KLD +1.6 % on one byte; tq4 on ±63: 0.004-0.006).
constexpr double kInt8ValueMax = 0.01;

// Fills `k` for a layout and its coordinate scale (tqc; null: all 1).
// usable stays false for layouts it does not read or whose predicted added
// error exceeds kInt8MaxPredicted. residual_above: the predicted share above
// which the query gets its residual byte (tests pass 0 to reach the residual
// and 16-bit paths on any layout).
// allow_narrow = false keeps the bytes within ±127 where AVX2 would take
// them narrow (tests reach the word kernels of those layouts with it).
// side kValues: a table for int8_values alone (tq4's bytes within ±kNarrowV
// on AVX2); its K kernels would still give the specification's integers.
void int8_keys_prepare(const RowLayout& layout, int d, int dp, const float* coord_scale, Int8Keys& k,
                       double residual_above = kInt8Residual, bool allow_narrow = true,
                       Int8Side side = Int8Side::kKeys);

// The kernels that run the integer path: AVX-512 VBMI + VNNI (vpermb,
// vpdpbusd), AVX2 (vpshufb, vpmaddwd on words; score_int8_avx2.cpp), or none
// (the scalar functions serve only as the specification, and attention keeps
// the exact f32 path). Every kernel gives the specification's integers.
enum class Int8Target { kNone, kAvx2, kAvx512 };
// The one in use: the widest this CPU has, unless TKV_INT8_TARGET (avx512,
// avx2, none) in the environment or int8_set_target chose another.
Int8Target int8_target();
bool int8_target_supported(Int8Target t);
// Pins the kernels (tests check every target against the specification);
// false, and nothing changed, when this CPU lacks t's instructions.
bool int8_set_target(Int8Target t);
// True when some kernel runs (int8_target() != kNone).
bool int8_keys_cpu();
bool int8_avx512_cpu();
bool int8_avx2_cpu();

// Quantizes one query (dp floats, natural coordinate order; coordinates no
// part covers must already be 0) into q8[dp]: q8 = round(q / qs), nearest
// with ties to even, qs = max|q| / 127; returns qs, and the bias 128 · Σ q8
// in *bias. The _ref functions are the specification; the others give the
// same bytes (AVX-512 where int8_keys_cpu()).
float int8_quantize_query(const float* q, int dp, int8_t* q8, int32_t* bias);
float int8_quantize_query_ref(const float* q, int dp, int8_t* q8, int32_t* bias);
// The residual byte: r8 = round(fma(−qs, q8, q) / (qs / 254)); returns qs / 254
// and its bias in *bias.
// The centroids' residual bytes as a table of their own (cr8 + 128, scale
// cs / 254), read by the same kernels: `r` is `k` with that table.
void int8_residual_table(const Int8Keys& k, const RowLayout& layout, Int8Keys& r);
float int8_quantize_residual(const float* q, int dp, float qs, const int8_t* q8, int8_t* r8, int32_t* bias);
float int8_quantize_residual_ref(const float* q, int dp, float qs, const int8_t* q8, int8_t* r8, int32_t* bias);

// dots[j * ld + r] = Σ_i (c8(code of row r, coordinate i) + 128) · q8[j][i]
// for G queries (q8 + j * dp) and n rows. rows[r] points at a row (its 16-bit
// scale first). The reference decodes codes with the codec's own unpacking;
// the fast kernel must give the same integers.
void int8_dots_ref(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const int8_t* q8,
                   int G, int32_t* dots, int ld);
void int8_dots(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const int8_t* q8, int G,
               int32_t* dots, int ld);
// Both at once, the codes unpacked once: k's table with G queries into dots,
// and (k2 non-null) k2's table with the first G2 of them into dots2.
void int8_dots2(const Int8Keys& k, const Int8Keys* k2, const RowLayout& layout, const uint8_t* const* rows, int n,
                const int8_t* q8, int G, int32_t* dots, int G2, int32_t* dots2, int ld);

// The wide path (k.wide): q' ≈ qs16 · q16, q16 = round(q' / qs16) (nearest,
// ties to even), qs16 = max|q'| / wmax; score ≈ s_t · qs16 · cs16 · Σ_i
// c16(code_i) · q16_i (vpdpwssd, 32 products an instruction; no offset: both
// are signed). Two words where the residual path takes three dots of bytes.
float int8_quantize_query16(const float* q, int dp, int wmax, int16_t* q16);
float int8_quantize_query16_ref(const float* q, int dp, int wmax, int16_t* q16);
void int8_dots16_ref(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const int16_t* q16,
                     int G, int32_t* dots, int ld);
void int8_dots16(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const int16_t* q16,
                 int G, int32_t* dots, int ld);

// Values (V rows of a tq layout, Int8Keys prepared for V's layout):
//   acc[j][i] += (wmax_j / 255) · cs · Σ_r w8_jr · c8(code of row r, coordinate i)
// with w8_jr = round(255 · w[j][r] / wmax_j), wmax_j = max_r w[j][r] (the
// weights: softmax numerators times row scales, >= 0). acc is [G][dp] in
// natural coordinate order; n <= int8_values_rows(k) (one block of rows, one
// weight scale a query). int8_weights quantizes one query's n weights and
// returns wmax / 255 (0 with bytes 0 when all are 0, or when wmax is below
// 255 / FLT_MAX, where 255 / wmax is not finite). The integer sums are exact in both
// (n <= 128: 128 · 255 · 127 < 2^31); the float update is one multiply and
// one add per coordinate.
float int8_weights(const float* w, int n, uint8_t* w8);
void int8_values_ref(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const float* w,
                     int G, int ldw, float* acc);
void int8_values(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const float* w, int G,
                 int ldw, float* acc);
// The most rows one call of int8_values_ordered takes as one block with the
// specification's integers: where AVX-512's lane kernels run 128 for tq2
// (one 2-bit plane) and 64 for the others (attention's integer path then
// reads that many rows a block), 32 elsewhere (AVX2's kernels and the pair
// tables keep 16-bit sums of 32 rows).
int int8_values_rows(const Int8Keys& k);

// The orders of the lane kernels: position p of a query (int8_dots_ordered)
// or of an accumulator row (int8_values_ordered) holds
// coordinate perm[p]; the identity (and false) where no ordered kernel runs
// (AVX-512: k.lanes_* not set; AVX2: k.avx2_sig 0, or K with residual or
// 16-bit words; another target in use).
//   p = 64c + 16s + b  <->  coordinate 64c + 4b + s   (b < 16, s < 4)
// (chunk c of 64 coordinates; in a 2-bit plane, byte b of the chunk holds
// coordinates 4b .. 4b+3 and s picks one). 4-bit codes (avx2_sig 40: AVX2's
// ordered decode, and AVX-512's tq4 keys and values at dp 128 and 256):
//   p = 64c + 32s + b  <->  coordinate 64c + 2b + s   (b < 32, s < 2).
bool int8_query_order(const Int8Keys& k, int* perm);
bool int8_values_order(const Int8Keys& k, int* perm);
// int8_dots / int8_values with queries and accumulators in those orders
// (attention's path: its queries are reordered when they are quantized, its
// accumulators put back in natural order by the output stage through the V
// reader's perm). The same integers as the natural functions, which reorder
// and call these where the lane kernels run.
//
// pf: bytes the caller wants in L2 for its next block (attention's prefetch
// of the next block's rows, one span of cache lines). The AVX-512 lane
// kernels request its lines spread over their steps (keys at dp 64 all
// after their rows), the others half before their rows and half after (as
// attention's phases did: all after cost AVX2's tq2 26 %, RESULTS §53);
// every line is requested once.
struct PrefetchSpan {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
};
// The lines of a span not yet requested (prefetcht1, into L2): step(k)
// requests the next k, rest() the others.
struct PrefetchLines {
  const uint8_t* a;
  const uint8_t* e;
  explicit PrefetchLines(PrefetchSpan s)
      : a(reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(s.begin) & ~uintptr_t{63})), e(s.end) {}
  int count() const { return a < e ? static_cast<int>((e - a + 63) / 64) : 0; }
  void step(int k) {
    for (; k > 0 && a < e; --k, a += 64) __builtin_prefetch(a, 0, 2);
  }
  void rest() { step(count()); }
  // Half the lines, fn(), the rest (a kernel that takes no span).
  template <class Fn>
  void around(Fn&& fn) {
    step(count() / 2);
    fn();
    rest();
  }
};
void int8_dots_ordered(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                       const int8_t* q8, int G, int32_t* dots, int ld, PrefetchSpan pf = {});
void int8_values_ordered(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const float* w,
                         int G, int ldw, float* acc, PrefetchSpan pf = {});

// The pair tables (k.lut): one query's dp floats (natural order, coordinates
// no part covers 0) into lut[dp/2][32]: for pair P and x < 16,
//   e = q_2P · c_(x & 3) + q_2P+1 · c_(x >> 2)   (float, the product then an fma)
//   lut[P][x] = lut[P][16 + x] = clamp(round(e / sL), −127, 127) + 128
// (nearest, ties to even; the 16 bytes twice: one per 128-bit lane), with
// sL = m / 127, m = cmax · max_P (|q_2P| + |q_2P+1|) >= |e|, cmax = max |c|;
// round(e / sL) is computed as nearbyint(e · (127 / m)). Returns sL (0, every
// byte 128, for m < 1e-30: a zero query; NaN where a coordinate is NaN) and
// the bias 128 · dp/2 in *bias. score ≈ s_t · sL · (Σ_P lut[P][nibble P of
// the row] − bias), each table entry within sL/2 of e: |error| <= s_t · dp/4
// · sL. The _ref function is the specification; int8_lut_build gives its
// bytes (AVX2 where that is the target: 8 entries a vector, the same fma).
constexpr size_t int8_lut_bytes(int dp) { return static_cast<size_t>(dp) * 16; }
float int8_lut_build(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias);
float int8_lut_build_ref(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias);
// sL of one query (as above), and 127 / m (0 below 1e-30) in *inv.
float int8_lut_scale(const Int8Keys& k, const float* q, float* inv);
// dots[j * ld + r] = Σ_P lut_j[P][nibble P of row r's plane bytes] for G
// tables (lut + j · int8_lut_bytes(dp)) and n rows; nibble P is bits
// 4(P mod 2) .. +3 of plane byte P/2. The AVX2 kernel gives the same
// integers (32 rows a block, any n and G).
void int8_lut_dots_ref(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                       const uint8_t* lut, int G, int32_t* dots, int ld);
void int8_lut_dots(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const uint8_t* lut,
                   int G, int32_t* dots, int ld);

// V's pair tables (k.vlut): with w8 and ws = wmax / 255 from int8_weights,
//   r_j(row, c) = (w8_j,row · c8_c + 64) >> 7            (c8_c = table[0][c] − 128, |r| <= 62)
//   T_jP[x] = r_j(2P, x & 3) + r_j(2P+1, x >> 2) + 128    (x = code(2P, i) | code(2P+1, i) << 2)
//   acc[j][i] += (ws_j · cs · 128) · (Σ_P T_jP[x_P(i)] − 128 · ceil(n/2))
// (an odd n's last pair: row n−1 again, with weight byte 0: r = 0). Each r is
// within 1/2 of w8 · c8 / 128, so |error| <= ws · cs · 64 · n beyond
// int8_values' own. n <= 32, acc natural (_ref) or in int8_values_order
// (_ordered; the AVX2 kernel where that is the target, 32 rows a block).
void int8_vlut_values_ref(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                          const float* w, int G, int ldw, float* acc);
void int8_vlut_values_ordered(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                              const float* w, int G, int ldw, float* acc);

// The AVX2 kernels (score_int8_avx2.cpp; int8_avx2_cpu() only), called
// through the functions above.
// ordered: queries / accumulators in int8_query_order / int8_values_order
// (k.avx2_sig set; the ordered decode), else natural.
void int8_dots2_avx2(const Int8Keys& k, const Int8Keys* k2, const RowLayout& layout, const uint8_t* const* rows, int n,
                     const int8_t* q8, int G, int32_t* dots, int G2, int32_t* dots2, int ld, bool ordered = false);
void int8_dots16_avx2(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const int16_t* q16,
                      int G, int32_t* dots, int ld);
void int8_values_avx2(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n, const float* w,
                      int G, int ldw, float* acc, bool ordered = false);
void int8_lut_dots_avx2(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                        const uint8_t* lut, int G, int32_t* dots, int ld);
float int8_lut_build_avx2(const Int8Keys& k, const float* q, uint8_t* lut, int32_t* bias);
void int8_vlut_values_avx2(const Int8Keys& k, const RowLayout& layout, const uint8_t* const* rows, int n,
                           const float* w, int G, int ldw, float* acc);

// A bound on |approximate − exact| for one score divided by the row scale s_t:
// Σ_i |c_i|·|q'_i − qs q8_i| + |q'_i|·|c_i − cs c8_i| + |q'_i − qs q8_i|·|c_i − cs c8_i|
// bounded with |q' − qs q8| ≤ qs/2 and |c − cs c8| ≤ cs/2:
// (qs/2)·Σ_i|c_i| + (cs/2)·Σ_i|q'_i| + d·qs·cs/4, with |c_i| ≤ cmax; with
// k.residual the two-byte terms (score_int8.cpp); with k.wide the same
// one-step form with qs16 and cs16. qs: the query's main scale (qs16 when wide).
double int8_score_bound(const Int8Keys& k, const float* q, int dp, float qs);

}  // namespace tkv::attn
