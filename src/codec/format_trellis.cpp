// Trellis-coded formats ttB (issue 20, docs/FORMATS.md §4f): a bitshift
// trellis over the rotated coordinates. After the tq rotation and the row's
// norm (16 bits, §4.2), coordinate t of u = sqrt(d) y / |y| is coded by B
// bits c_t; its value is table[s_t], where the state s_t is the last six bits
// of the code stream up to and including c_t (s_t = (s_{t-1} << B | c_t) mod
// 64, s_{-1} = 0): 64 states, 2^B branches out of each. The encoder picks
// the whole code sequence with the least squared error (Viterbi, 64 x 2^B
// per coordinate); the decoder is a table lookup per coordinate (each state
// is a window of the bit stream, so coordinates decode independently).
// The 64-entry table is trained once per B on N(0, 1) samples (alternating
// Viterbi assignment and per-state means, a fixed seed: the same table in
// every process). Rows decode through the codec (RowLayout kind kOpaque).
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "codec/format.h"
#include "codec/kernels.h"
#include "codec/trellis.h"
#include "util/fp16.h"
#include "util/rng.h"

namespace tkv {
namespace {
constexpr int kStateBits = kTrellisStateBits, kStates = kTrellisStates;
}  // namespace

double trellis_viterbi(const float* x, int n, int bits, const float* table, uint8_t* codes) {
  const int branches = 1 << bits;
  std::vector<double> cost(kStates, std::numeric_limits<double>::infinity()), next(kStates);
  std::vector<uint8_t> from(size_t(n) * kStates);  // the predecessor's top bits, per (t, state)
  cost[0] = 0.0;
  const int shift = kStateBits - bits;  // a state's oldest bits, dropped by the next step
  for (int t = 0; t < n; ++t) {
    std::fill(next.begin(), next.end(), std::numeric_limits<double>::infinity());
    uint8_t* fr = &from[size_t(t) * kStates];
    for (int s = 0; s < kStates; ++s) {
      if (cost[s] == std::numeric_limits<double>::infinity()) continue;
      for (int c = 0; c < branches; ++c) {
        const int ns = ((s << bits) | c) & (kStates - 1);
        const double e = double(x[t]) - table[ns];
        const double v = cost[s] + e * e;
        if (v < next[ns]) {
          next[ns] = v;
          fr[ns] = static_cast<uint8_t>(s >> shift);  // the bits of s that leave the window
        }
      }
    }
    cost.swap(next);
  }
  int best = 0;
  for (int s = 1; s < kStates; ++s)
    if (cost[s] < cost[best]) best = s;
  const double err = cost[best];
  for (int t = n - 1, s = best; t >= 0; --t) {  // walk back: the code is a state's newest bits
    codes[t] = static_cast<uint8_t>(s & ((1 << bits) - 1));
    s = (s >> bits) | (int(from[size_t(t) * kStates + s]) << shift);
  }
  return err;
}

// The table for B bits: Lloyd iterations over Viterbi paths on N(0, 1).
const std::vector<float>& trellis_table(int bits) {
  static std::mutex mu;
  static std::vector<float> tables[9];
  std::lock_guard<std::mutex> g(mu);
  std::vector<float>& t = tables[bits];
  if (!t.empty()) return t;
  t.resize(kStates);
  // Start: Gaussian quantiles at the states' newest bits (what a scalar code
  // of B bits would give), spread by the older bits.
  const Codebook& cb = lloyd_max(1024, bits);  // nearly Gaussian, unit variance after scaling
  const double sc = std::sqrt(1024.0);
  for (int s = 0; s < kStates; ++s)
    t[s] = static_cast<float>(cb.centroids_f[s & ((1 << bits) - 1)] * sc * (1.0 + 0.05 * ((s >> bits) % 3 - 1)));
  Rng rng(0x7e11150000000000ull + bits);
  const int rows = 256, n = 256;
  std::vector<float> x(size_t(rows) * n);
  for (float& v : x) v = static_cast<float>(rng.gaussian());
  std::vector<uint8_t> codes(n);
  for (int it = 0; it < 12; ++it) {
    std::vector<double> sum(kStates, 0.0), cnt(kStates, 0.0);
    for (int r = 0; r < rows; ++r) {
      trellis_viterbi(&x[size_t(r) * n], n, bits, t.data(), codes.data());
      int s = 0;
      for (int i = 0; i < n; ++i) {
        s = ((s << bits) | codes[i]) & (kStates - 1);
        sum[s] += x[size_t(r) * n + i];
        cnt[s] += 1;
      }
    }
    for (int s = 0; s < kStates; ++s)
      if (cnt[s] > 0) t[s] = static_cast<float>(sum[s] / cnt[s]);
  }
  return t;
}

class TrellisCodec final : public Codec {
 public:
  TrellisCodec(std::string_view name, int d, int bits, std::shared_ptr<const Rotation> rot)
      : Codec(std::string(name), d, FormatFamily::kTurbo), bits_(bits), table_(trellis_table(bits)) {
    rotation_ = std::move(rot);
    row_bytes_ = 2 + (size_t(d) * bits + 7) / 8;
    layout_.kind = RowLayout::Kind::kOpaque;
    layout_.d = d;
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl) const override {
    double ss = 0;
    for (int i = 0; i < d_; ++i) ss += double(y[i]) * y[i];
    const double norm = std::sqrt(ss);
    if (!(norm < kUNormMax)) return Status::Error("norm " + std::to_string(norm) + " exceeds the norm range (4.29e9)");
    const float inv = norm > 0 ? static_cast<float>(std::sqrt(double(d_)) / norm) : 0.0f;
    std::vector<float> u(d_);
    for (int i = 0; i < d_; ++i) u[i] = y[i] * inv;
    std::vector<uint8_t> codes(d_);
    trellis_viterbi(u.data(), d_, bits_, table_.data(), codes.data());
    // The stored norm scales the decoded row to the least-squares fit of y.
    double num = 0, den = 0;
    for (int i = 0, s = 0; i < d_; ++i) {
      s = ((s << bits_) | codes[i]) & (kStates - 1);
      num += double(table_[s]) * y[i];
      den += double(table_[s]) * table_[s];
    }
    const float scale = den > 0 ? static_cast<float>(std::max(0.0, num / den)) : 0.0f;
    const uint16_t h = f32_to_unorm16(scale);
    std::memcpy(out, &h, 2);
    std::memset(out + 2, 0, row_bytes_ - 2);
    for (int i = 0; i < d_; ++i)  // B bits per coordinate, LSB first
      for (int b = 0; b < bits_; ++b)
        if ((codes[i] >> b) & 1) {
          const size_t bit = size_t(i) * bits_ + b;
          out[2 + bit / 8] |= uint8_t(1u << (bit % 8));
        }
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl) const override {
    uint16_t h;
    std::memcpy(&h, in, 2);
    const float scale = unorm16_to_f32(h);
    for (int i = 0, s = 0; i < d_; ++i) {
      int c = 0;
      for (int b = 0; b < bits_; ++b) {
        const size_t bit = size_t(i) * bits_ + b;
        c |= ((in[2 + bit / 8] >> (bit % 8)) & 1) << b;
      }
      s = ((s << bits_) | c) & (kStates - 1);
      out[i] = table_[s] * scale;
    }
  }

 private:
  int bits_;
  const std::vector<float>& table_;
};

std::unique_ptr<Codec> make_trellis_codec(std::string_view name, int d, uint64_t seed) {
  if (name.size() != 3 || name.substr(0, 2) != "tt") return nullptr;
  const int bits = name[2] - '0';
  if (bits < 1 || bits > 4) return nullptr;
  auto rot = Rotation::make(d, seed);
  if (!rot) return nullptr;
  return std::make_unique<TrellisCodec>(name, d, bits, *rot);
}

}  // namespace tkv
