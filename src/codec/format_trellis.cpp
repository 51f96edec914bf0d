// Trellis-coded formats ttB (issue 20, docs/FORMATS.md §4f): a bitshift
// trellis over the rotated coordinates. After the tq rotation and the row's
// norm (16 bits, §4.2), coordinate t of u = sqrt(d) y / |y| is coded by B
// bits c_t; its value is table[s_t], where the state s_t is the last six bits
// of the code stream up to and including c_t (s_t = (s_{t-1} << B | c_t) mod
// 64, s_{-1} = 0): 64 states, 2^B branches out of each. The encoder picks
// the whole code sequence with the least squared error (Viterbi, 64 x 2^B
// per coordinate); the decoder is a table lookup per coordinate (each state
// is a window of the bit stream, so coordinates decode independently).
// The 64-entry table was trained per B on N(0, 1) samples (alternating
// Viterbi assignment and per-state means, a fixed seed; trellis_train_table)
// and is kept as constants. Rows decode through the codec (RowLayout kind kOpaque).
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
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

namespace {
// trellis_train_table(1..4) as computed on the development machine (x86-64,
// GCC 12, -O2): constants, so that every build codes the same bits and no
// process spends the training time (seconds under sanitizers).
constexpr float kTables[4][kStates] = {
    {-0.847866297f, 0.44509545f, -0.553901017f, 1.06785154f, -0.379502445f, 1.10018718f,
     -0.668362916f, 0.504890203f, -0.207122266f, 1.25287807f, -1.47897089f, 0.183969572f,
     -1.41514337f, 0.260030389f, -0.248050407f, 1.27679217f, -0.906653762f, 0.906796098f,
     -0.718949854f, 0.269300967f, -0.619828701f, 0.540975153f, -1.40140486f, 0.756757915f,
     -1.29058671f, 0.238716766f, -0.254110277f, 1.28060138f, -0.287227899f, 1.28834057f,
     -0.970756531f, 0.355476618f, -1.17400253f, 0.580823541f, -0.550971448f, 0.785044491f,
     -0.689801931f, 0.51911968f, -0.876456976f, 0.616440952f, -1.32627809f, 0.265276253f,
     -0.233367473f, 1.30773067f, -0.23658894f, 1.36914766f, -1.12988079f, 0.435505092f,
     -0.256645232f, 1.31439543f, -0.816090524f, 0.696672738f, -1.31455564f, 0.39631319f,
     -0.295755416f, 1.48302317f, -0.343280792f, 1.230654f, -1.44313574f, 0.267359793f,
     -1.05027235f, 0.35218811f, -0.460255563f, 0.959513545f},
    {-1.62575066f, -0.426743716f, 0.556587994f, 1.63850117f, -1.0237323f, -0.179715738f,
     0.249305785f, 1.12780046f, -1.72612071f, -0.420079321f, 0.624080896f, 1.98377287f,
     -1.14912295f, -0.368631363f, 0.229137942f, 1.04951f, -1.0941999f, -0.205448911f,
     0.297886848f, 1.06034374f, -1.98819089f, -0.628111243f, 0.617615819f, 2.17903852f,
     -0.995875895f, -0.230377302f, 0.194824815f, 1.05372095f, -2.00896907f, -0.568140924f,
     0.330192775f, 1.33602536f, -1.95416784f, -0.564200222f, 0.447339624f, 1.68926227f,
     -0.959727049f, -0.18643105f, 0.141725332f, 1.0258677f, -1.65123057f, -0.546041131f,
     0.416276246f, 1.4050597f, -1.22922528f, -0.275041461f, 0.556011319f, 1.86223519f,
     -1.08323383f, -0.184632108f, 0.503244162f, 1.33459413f, -1.63696086f, -0.510872304f,
     0.301821381f, 1.28992939f, -1.41289735f, -0.380479217f, 0.577591598f, 2.08007312f,
     -1.27204156f, -0.436692268f, 0.171244845f, 1.07095551f},
    {-2.30685663f, -1.41385818f, -0.770696163f, -0.258499682f, 0.225225389f, 0.65149498f,
     1.18167818f, 1.94258749f, -1.84655941f, -1.13713813f, -0.631189346f, -0.226986811f,
     0.182536021f, 0.625309944f, 1.12477088f, 1.79844618f, -2.56443381f, -1.44624543f,
     -0.827381432f, -0.274669141f, 0.270413905f, 0.797986865f, 1.41040325f, 2.52673411f,
     -1.73761094f, -1.06709051f, -0.584709585f, -0.161363304f, 0.212463319f, 0.581731796f,
     1.03257394f, 1.70531321f, -2.03443789f, -1.25131071f, -0.72848177f, -0.276493788f,
     0.215413496f, 0.6909253f, 1.25000787f, 2.00041199f, -2.72615743f, -1.43671334f,
     -0.836437523f, -0.257774651f, 0.307166904f, 0.855810463f, 1.45317626f, 2.63010359f,
     -1.83232212f, -1.09612215f, -0.613145411f, -0.247856185f, 0.151866317f, 0.564928532f,
     1.07262218f, 1.82162476f, -2.20521259f, -1.36577177f, -0.757304192f, -0.214522108f,
     0.314594507f, 0.810253799f, 1.43277156f, 2.3988595f},
    {-2.24072528f, -1.74718368f, -1.40761518f, -1.12216747f, -0.846493959f, -0.588410139f,
     -0.353582889f, -0.114862323f, 0.125767469f, 0.370285958f, 0.605053842f, 0.859607756f,
     1.16131055f, 1.45055842f, 1.78876722f, 2.27281404f, -2.67471313f, -1.96500254f,
     -1.55087626f, -1.20571125f, -0.916140914f, -0.638012946f, -0.38428095f, -0.14688088f,
     0.1021652f, 0.363616705f, 0.621186614f, 0.901089668f, 1.19639778f, 1.5429039f,
     1.96428788f, 2.66924191f, -3.43517804f, -2.24508953f, -1.71974504f, -1.34650266f,
     -1.01783001f, -0.714944899f, -0.432483047f, -0.153132707f, 0.146570891f, 0.434446454f,
     0.709372818f, 1.00582123f, 1.34269428f, 1.73376751f, 2.2428329f, 3.39598036f,
     -2.71626163f, -1.93644679f, -1.51844466f, -1.19148386f, -0.889590681f, -0.599792421f,
     -0.34956336f, -0.124529392f, 0.104348287f, 0.339511573f, 0.587175131f, 0.847704172f,
     1.15256083f, 1.50801063f, 1.91523957f, 2.6570394f}
};
}  // namespace

const std::vector<float>& trellis_table(int bits) {
  static const std::vector<float> tables[4] = {
      {kTables[0], kTables[0] + kStates}, {kTables[1], kTables[1] + kStates},
      {kTables[2], kTables[2] + kStates}, {kTables[3], kTables[3] + kStates}};
  return tables[bits - 1];
}

// Lloyd iterations over Viterbi paths on N(0, 1): where kTables came from.
std::vector<float> trellis_train_table(int bits) {
  std::vector<float> t(kStates);
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
    const auto unit = unit_scale(y, d_);
    if (!unit) return unit.status();
    const float inv = static_cast<float>(*unit);
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
