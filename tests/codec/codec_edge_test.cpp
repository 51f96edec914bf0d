// Edge cases of the formats: zero rows, huge and tiny norms, NaN/Inf errors,
// honest bits per value, half-precision conversions, bit-plane packing.
#include <gtest/gtest.h>
#include <immintrin.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "codec/format.h"
#include "codec/kernels.h"
#include "util/fp16.h"
#include "util/rng.h"

namespace tkv {
namespace {

__attribute__((target("f16c"))) float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

TEST(Fp16, HalfRoundTripsEveryValueAndMatchesF16C) {
  const bool hw = __builtin_cpu_supports("f16c");
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
    if (hw) {
      EXPECT_EQ(hw_h2f(static_cast<uint16_t>(h)), f);
    }
  }
  Rng rng(5);
  for (int i = 0; i < 200000; ++i) {
    const float f = bits_f32(static_cast<uint32_t>(rng.next()));
    if (std::isnan(f) || !hw) continue;
    ASSERT_EQ(f32_to_f16(f), hw_f2h(f)) << f;
  }
}

TEST(Fp16, BF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(3.0f)), 3.0f);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
}

TEST(Fp16, UnsignedNormKeepsElevenBitsFrom1eMinus9To4e9) {
  for (double v = 1e-9; v < 4.2e9; v *= 1.37) {
    const float back = unorm16_to_f32(f32_to_unorm16(static_cast<float>(v)));
    EXPECT_NEAR(back / v, 1.0, 1.0 / 2048) << v;
  }
  EXPECT_EQ(unorm16_to_f32(f32_to_unorm16(0.0f)), 0.0f);
  EXPECT_EQ(unorm16_to_f32(f32_to_unorm16(1e-12f)), 0.0f);  // below range: zero
}

RC_GTEST_PROP(Packing, PlanesRoundTripAnyWidthAndLength, ()) {
  const int n = *rc::gen::inRange(1, 700);
  const int width = *rc::gen::element(1, 2, 4, 8);
  const int shift = *rc::gen::inRange(0, 8 - width + 1);
  std::vector<uint8_t> vals(n), out(n, 0), packed(plane_bytes(n, width) + 1, 0xAB);
  for (auto& v : vals) v = static_cast<uint8_t>(*rc::gen::inRange(0, 1 << width) << shift);
  const size_t nb = pack_plane(vals.data(), n, width, shift, packed.data());
  RC_ASSERT(nb == plane_bytes(n, width));
  RC_ASSERT(packed[nb] == 0xAB);  // nothing written past the plane
  unpack_plane_or(packed.data(), n, width, shift, out.data());
  RC_ASSERT(out == vals);
}

TEST(Formats, BitsPerValueAreHonest) {
  for (int d : {64, 80, 96, 128, 256, 576}) {
    for (int b = 1; b <= 8; ++b) {
      auto c = make_codec("tq" + std::to_string(b), d);
      ASSERT_TRUE(c.ok());
      EXPECT_DOUBLE_EQ((*c)->bits_per_value(), b + 16.0 / d) << "tq" << b << " d=" << d;
    }
    for (int b = 1; b <= 7; ++b) {
      auto c = make_codec("tq" + std::to_string(b) + ".5", d);
      ASSERT_TRUE(c.ok());
      EXPECT_LE((*c)->bits_per_value(), b + 0.5 + 1e-12) << "tq" << b << ".5 d=" << d;
      EXPECT_GT((*c)->bits_per_value(), b + 0.5 - 16.0 / d) << "tq" << b << ".5 d=" << d;
    }
    EXPECT_DOUBLE_EQ((*make_codec("f16", d))->bits_per_value(), 16.0);
    EXPECT_DOUBLE_EQ((*make_codec("bf16", d))->bits_per_value(), 16.0);
    EXPECT_DOUBLE_EQ((*make_codec("f32", d))->bits_per_value(), 32.0);
    const double blocks = std::ceil(d / 32.0);
    EXPECT_DOUBLE_EQ((*make_codec("q8_0", d))->bits_per_value(), blocks * 34 * 8 / d);
    EXPECT_DOUBLE_EQ((*make_codec("q4_0r", d))->bits_per_value(), blocks * 18 * 8 / d);
  }
  EXPECT_DOUBLE_EQ((*make_codec("tq4", 128))->bits_per_value(), 4.125);
  EXPECT_DOUBLE_EQ((*make_codec("tq4.5", 128))->bits_per_value(), 4.5);
}

TEST(Formats, ZeroRowsDecodeToZeros) {
  for (const auto& name : all_format_names())
    for (int d : {64, 96, 128}) {
      auto c = make_codec(name, d);
      std::vector<float> x(3 * d, 0.0f), y(3 * d, 1.0f);
      std::vector<uint8_t> q(3 * (*c)->row_bytes());
      ASSERT_TRUE((*c)->quantize(x.data(), 3, q.data()).ok()) << name;
      (*c)->dequantize(q.data(), 3, y.data());
      for (float v : y) ASSERT_EQ(v, 0.0f) << name << " d=" << d;
    }
}

TEST(Formats, NormsFrom1eMinus6To1e4KeepRelativeError) {
  Rng rng(9);
  const int d = 128;
  std::vector<float> base(d);
  for (auto& v : base) v = static_cast<float>(rng.gaussian());
  for (const auto& name : all_format_names()) {
    auto c = make_codec(name, d);
    double ref_err = -1;
    for (double scale : {1e-6, 1e-4, 1e-2, 1.0, 1e2, 1e4}) {
      std::vector<float> x(d), y(d);
      double n2 = 0;
      for (int i = 0; i < d; ++i) { x[i] = static_cast<float>(base[i] * scale / std::sqrt(double(d))); n2 += double(x[i]) * x[i]; }
      std::vector<uint8_t> q((*c)->row_bytes());
      auto s = (*c)->quantize(x.data(), 1, q.data());
      if (name == "f16" && scale < 1e-3) continue;  // f16 itself has no range there
      ASSERT_TRUE(s.ok()) << name << " " << s.message();
      (*c)->dequantize(q.data(), 1, y.data());
      double e = 0;
      for (int i = 0; i < d; ++i) e += std::pow(double(x[i]) - y[i], 2);
      const double rel = e / n2;
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << name;
      if (name.rfind("q", 0) == 0 && scale < 1e-3) continue;  // f16 block scales go subnormal (llama.cpp's layout)
      if (ref_err < 0) ref_err = rel;
      if (name.rfind("tq", 0) == 0) {
        // Norm + unit-direction codes: the same relative error at every scale.
        EXPECT_NEAR(rel, ref_err, 0.02 * ref_err + 1e-9) << name << " scale " << scale;
      } else {
        // Rounding formats: the error changes with the rounding, not with the scale.
        EXPECT_LT(rel, 3 * ref_err + 1e-7) << name << " scale " << scale;
      }
    }
  }
}

TEST(Formats, NanOrInfIsAnErrorNamingTheRow) {
  const int d = 96;
  for (const auto& name : all_format_names()) {
    auto c = make_codec(name, d);
    std::vector<float> x(4 * d, 0.5f);
    std::vector<uint8_t> q(4 * (*c)->row_bytes());
    x[2 * d + 17] = std::numeric_limits<float>::quiet_NaN();
    auto s = (*c)->quantize(x.data(), 4, q.data());
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("row 2"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("element 17"), std::string::npos) << s.message();
    x[2 * d + 17] = 0.5f;
    x[3 * d] = -std::numeric_limits<float>::infinity();
    s = (*c)->quantize(x.data(), 4, q.data());
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("row 3"), std::string::npos) << s.message();
  }
}

TEST(Formats, OutOfRangeValuesAreErrorsNotGarbage) {
  const int d = 64;
  std::vector<float> x(d, 1.0f);
  x[5] = 1e7f;
  for (const char* name : {"f16", "q8_0", "q4_0"}) {
    auto c = make_codec(name, d);
    std::vector<uint8_t> q((*c)->row_bytes());
    auto s = (*c)->quantize(x.data(), 1, q.data());
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
  x[5] = 1e12f;
  auto c = make_codec("tq4", d);
  std::vector<uint8_t> q((*c)->row_bytes());
  auto s = (*c)->quantize(x.data(), 1, q.data());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("norm"), std::string::npos) << s.message();
  // -ip stores more than the norm: a norm just inside the range must still fail
  // rather than saturate.
  {
    std::vector<float> big(d, 0.0f);
    big[0] = 4.2e9f;
    auto ip = make_codec("tq1-ip", d);
    std::vector<uint8_t> qi((*ip)->row_bytes());
    EXPECT_FALSE((*ip)->quantize(big.data(), 1, qi.data()).ok());
  }
  {
    std::vector<float> huge(d, 1.0f);
    huge[3] = 3.4e38f;
    auto bf = make_codec("bf16", d);
    std::vector<uint8_t> qb((*bf)->row_bytes());
    auto st = (*bf)->quantize(huge.data(), 1, qb.data());
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("bf16"), std::string::npos) << st.message();
  }
  // bf16 holds it.
  auto bf = make_codec("bf16", d);
  std::vector<uint8_t> qb((*bf)->row_bytes());
  EXPECT_TRUE((*bf)->quantize(x.data(), 1, qb.data()).ok());
}

TEST(Formats, UnknownNamesAndDimsAreClearErrors) {
  auto c = make_codec("tq9", 128);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("tq9"), std::string::npos);
  EXPECT_FALSE(make_codec("tq0", 128).ok());
  EXPECT_FALSE(make_codec("tq8.5", 128).ok());
  EXPECT_FALSE(make_codec("q5_1", 128).ok());
  auto bad_d = make_codec("tq4", 4);
  ASSERT_FALSE(bad_d.ok());
  EXPECT_NE(bad_d.error().find("head dim 4"), std::string::npos);
  EXPECT_FALSE(make_codec("tq4", 2000).ok());
  EXPECT_TRUE(make_codec("tq4", 1000).ok());
  auto list = parse_format_list("tq4,bogus");
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.error().find("bogus"), std::string::npos);
}

TEST(Formats, Q8AndQ4MatchLlamaCppLayoutOnAKnownBlock) {
  // x_j = j - 16 for j = 0..31: amax 16 (first at j = 0, value -16).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  auto q8 = make_codec("q8_0", 32);
  std::vector<uint8_t> b8(34);
  ASSERT_TRUE((*q8)->quantize(x.data(), 1, b8.data()).ok());
  uint16_t h;
  std::memcpy(&h, b8.data(), 2);
  EXPECT_EQ(h, f32_to_f16(16.0f / 127));
  EXPECT_EQ(static_cast<int8_t>(b8[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(b8[2 + 24]), static_cast<int8_t>(std::round(8 * 127.0f / 16)));
  auto q4 = make_codec("q4_0", 32);
  std::vector<uint8_t> b4(18);
  ASSERT_TRUE((*q4)->quantize(x.data(), 1, b4.data()).ok());
  std::memcpy(&h, b4.data(), 2);
  EXPECT_EQ(h, f32_to_f16(-16.0f / -8));  // d = max / -8 with max = -16
  // value 0 (x=-16): -16/2 + 8.5 = 0.5 -> 0 in the low nibble of byte 0;
  // value 16 (x=0): 8.5 -> 8 in the high nibble of byte 0.
  EXPECT_EQ(b4[2], 0x80);
}

}  // namespace
}  // namespace tkv
