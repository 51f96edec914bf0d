// The flattened row programs (codec/flat_kernels.h) that the CUDA kernels run
// are checked here on the CPU, run by one thread: every byte they write equals
// the Codec's scalar reference, for every format the GPU supports and the head
// dims the CUDA issue names; coordinates decode as the codec decodes them;
// rotations equal Rotation's. (tests/cuda/cuda_test.cpp runs the same programs on a
// GPU, when there is one.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/calibrated.h"
#include "codec/flat_format.h"
#include "codec/flat_kernels.h"
#include "codec/format.h"
#include "util/rng.h"

namespace tkv {
namespace {

// Every format with a flat program: the table's, the fractional and corrected
// tq variants, and tqc at three widths (built on a synthetic basis).
std::vector<std::string> flat_formats() {
  std::vector<std::string> v = all_format_names();
  for (const char* f : {"tq1.5", "tq5.5", "tq7.5", "tq6-ip", "tq8-nc", "tq1-ip"}) v.push_back(f);
  return v;
}

std::unique_ptr<Codec> flat_test_codec(const std::string& fmt, int d) {
  if (fmt.rfind("tqc", 0) == 0) {
    auto c = make_calibrated_codec(fmt, synthetic_head_basis(d, 11));
    EXPECT_TRUE(c.ok()) << c.status().message();
    return std::move(*c);
  }
  auto c = make_codec(fmt, d);
  EXPECT_TRUE(c.ok()) << fmt << ": " << c.status().message();
  return std::move(*c);
}

// Rows that exercise the edge cases: Gaussian at several scales, a zero row,
// one spike, tiny values (subnormal block scales), a constant row.
std::vector<float> test_rows(int d, int n, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (int r = 0; r < n; ++r) {
    float* row = &x[static_cast<size_t>(r) * d];
    const double scale = std::pow(10.0, static_cast<int>(r % 7) - 3);
    for (int i = 0; i < d; ++i) row[i] = static_cast<float>(rng.gaussian() * scale);
    if (r == 1) std::memset(row, 0, sizeof(float) * d);
    if (r == 2) { std::memset(row, 0, sizeof(float) * d); row[d / 3] = 7.5f; }
    if (r == 3) for (int i = 0; i < d; ++i) row[i] = static_cast<float>(rng.gaussian() * 1e-30);
    if (r == 4) for (int i = 0; i < d; ++i) row[i] = 0.25f;
  }
  return x;
}

TEST(FlatCodec, QuantizeWritesTheReferenceBytesForEveryFormatAndHeadDim) {
  Rng rng(2026);
  std::vector<std::string> formats = flat_formats();
  for (const char* f : {"tqc1.5", "tqc2", "tqc3", "tqc4"}) formats.push_back(f);
  auto scratch = std::make_unique<flat::RowScratch>();
  for (int d : {64, 80, 96, 128, 256}) {
    for (const std::string& fmt : formats) {
      auto codec = flat_test_codec(fmt, d);
      ASSERT_TRUE(codec);
      std::vector<float> tables;
      auto ff = flatten_codec(*codec, tables);
      ASSERT_TRUE(ff.ok()) << ff.status().message();
      const int n = 24;
      const std::vector<float> x = test_rows(d, n, rng);
      const size_t rb = codec->row_bytes();
      std::vector<uint8_t> want(n * rb), got(n * rb, 0xAB);
      ASSERT_TRUE(codec->quantize(x.data(), n, want.data(), Impl::kRef).ok()) << fmt;
      const flat::SerialCtx ctx;
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(flat::quantize_row(ctx, *ff, tables.data(), &x[size_t(r) * d], &got[r * rb], *scratch),
                  flat::kRowOk) << fmt << " d=" << d << " row " << r;
        ASSERT_EQ(0, std::memcmp(&want[r * rb], &got[r * rb], rb)) << fmt << " d=" << d << " row " << r;
      }
      // Coordinates decode as the codec decodes them (before coord_scale).
      std::vector<float> dec(d);
      for (int r = 0; r < n; ++r) {
        codec->decode_unscaled(&want[r * rb], dec.data(), Impl::kRef);
        const float s = flat::row_scale(*ff, &want[r * rb]);
        for (int i = 0; i < d; ++i) {
          const float v = s * flat::decode_coord(*ff, tables.data(), &want[r * rb], i);
          ASSERT_EQ(f32_bits(dec[i]), f32_bits(v)) << fmt << " d=" << d << " row " << r << " coord " << i;
        }
      }
    }
  }
}

TEST(FlatCodec, RotationsEqualTheRotationClass) {
  Rng rng(7);
  auto scratch = std::make_unique<flat::RowScratch>();
  for (int d : {64, 80, 96, 128, 256}) {
    auto codec = flat_test_codec("tq4", d);
    std::vector<float> tables;
    auto ff = flatten_codec(*codec, tables);
    ASSERT_TRUE(ff.ok());
    std::vector<float> x(d), y(d), back(d);
    for (float& e : x) e = static_cast<float>(rng.gaussian());
    codec->rotation()->forward(x.data(), y.data(), Impl::kRef);
    flat::rotate_forward(flat::SerialCtx{}, *ff, tables.data(), x.data(), scratch->y);
    ASSERT_EQ(0, std::memcmp(y.data(), scratch->y, sizeof(float) * d)) << "forward d=" << d;
    codec->rotation()->inverse(y.data(), back.data(), Impl::kRef);
    flat::rotate_inverse(flat::SerialCtx{}, *ff, tables.data(), y.data(), scratch->x);
    ASSERT_EQ(0, std::memcmp(back.data(), scratch->x, sizeof(float) * d)) << "inverse d=" << d;
  }
}

TEST(FlatCodec, BadRowsAreRefusedAsTheCodecRefusesThem) {
  auto scratch = std::make_unique<flat::RowScratch>();
  const flat::SerialCtx ctx;
  for (const char* fmt : {"f16", "q8_0", "q4_0r", "tq3", "tq4-ip"}) {
    auto codec = flat_test_codec(fmt, 64);
    std::vector<float> tables;
    auto ff = flatten_codec(*codec, tables);
    ASSERT_TRUE(ff.ok());
    std::vector<float> x(64, 1.0f);
    std::vector<uint8_t> out(codec->row_bytes());
    x[17] = NAN;
    EXPECT_EQ(flat::quantize_row(ctx, *ff, tables.data(), x.data(), out.data(), *scratch), flat::kRowNonFinite) << fmt;
    EXPECT_FALSE(codec->quantize(x.data(), 1, out.data()).ok());
    x[17] = 1e30f;  // q scales overflow f16; tq norms exceed 4.29e9
    const int st = flat::quantize_row(ctx, *ff, tables.data(), x.data(), out.data(), *scratch);
    const bool codec_ok = codec->quantize(x.data(), 1, out.data()).ok();
    EXPECT_EQ(st == flat::kRowOk, codec_ok) << fmt << " status " << st;
  }
  // Rows only the codec reads have no flat program, and say so.
  for (const char* fmt : {"tq2-qjl", "tt2"}) {
    auto codec = flat_test_codec(fmt, 64);
    std::vector<float> tables;
    auto ff = flatten_codec(*codec, tables);
    ASSERT_FALSE(ff.ok());
    EXPECT_NE(ff.status().message().find(fmt), std::string::npos) << ff.status().message();
  }
}

}  // namespace
}  // namespace tkv
