// The E8 lattice format te8 (issue 20, docs/FORMATS.md §4g): after the tq
// rotation, each group of 8 coordinates of u = sqrt(d) y / |y| (unit
// variance) is coded by 16 bits as the nearest of 2^16 points of the shifted
// lattice E8 + 1/4 (codec/lattice.h), scaled by kE8Scale: 2 bits per
// coordinate. The row keeps one 16-bit scale, the least-squares fit of the
// decoded row to y (as ttB). Nearest point: Conway and Sloane's rounding for
// D8 + 1/2 in each half of the coset, which is the answer whenever the
// rounded point is in the table; otherwise the best sign pattern of each of
// the 256 absolute-value patterns (a search only rows with outliers need).
// Rows decode through the codec (RowLayout kind kOpaque).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/format.h"
#include "codec/lattice.h"
#include "util/fp16.h"

namespace tkv {
namespace {

// Absolute-value patterns as odd integers 2|y_i| in {1, 3, 5}.
struct Tables {
  std::array<std::array<uint8_t, 8>, 256> pat;
  std::array<float, 256> norm2;   // |pattern|^2 in lattice units
  std::vector<int16_t> index;     // base-3 key of a pattern -> its entry, or -1
};

int key_of(const uint8_t* v) {
  int k = 0;
  for (int i = 0; i < 8; ++i) k = k * 3 + (v[i] - 1) / 2;
  return k;
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t{};
    t.index.assign(6561, -1);
    std::vector<std::array<uint8_t, 8>> le10, sq12;
    for (int k = 0; k < 6561; ++k) {
      std::array<uint8_t, 8> v{};
      int r = k, n4 = 0;  // 4 |y|^2
      for (int i = 7; i >= 0; --i) {
        v[i] = static_cast<uint8_t>(2 * (r % 3) + 1);
        r /= 3;
        n4 += v[i] * v[i];
      }
      if (n4 <= 40) le10.push_back(v);
      // Of squared norm 12, the patterns of five 3/2 and three 1/2 (56),
      // in key order: the first 29 fill the table.
      else if (n4 == 48 && std::count(v.begin(), v.end(), 3) == 5) sq12.push_back(v);
    }
    std::stable_sort(le10.begin(), le10.end(), [](const auto& a, const auto& b) {
      int na = 0, nb = 0;
      for (int i = 0; i < 8; ++i) { na += a[i] * a[i]; nb += b[i] * b[i]; }
      return na < nb;
    });
    int e = 0;
    for (const auto& v : le10) t.pat[e++] = v;
    for (int i = 0; e < 256; ++i) t.pat[e++] = sq12[i];
    for (int i = 0; i < 256; ++i) {
      float n2 = 0;
      for (int j = 0; j < 8; ++j) n2 += 0.25f * t.pat[i][j] * t.pat[i][j];
      t.norm2[i] = n2;
      t.index[key_of(t.pat[i].data())] = static_cast<int16_t>(i);
    }
    return t;
  }();
  return t;
}

// Integer part of y_i - 1/2 for y_i = s * v / 2 (v odd): the D8 parity term.
inline int half_int(int s, int v) { return s > 0 ? (v - 1) / 2 : -(v + 1) / 2; }

}  // namespace

void e8_decode(uint16_t c, float* out) {
  const Tables& t = tables();
  const auto& p = t.pat[c & 255];
  int parity = 0;
  int s[8];
  for (int i = 0; i < 7; ++i) {
    s[i] = (c >> (8 + i)) & 1 ? -1 : 1;
    parity += half_int(s[i], p[i]);
  }
  s[7] = ((parity + half_int(1, p[7])) & 1) ? -1 : 1;  // the sum of y_i - 1/2 is even
  const float shift = (c >> 15) ? -0.25f : 0.25f;
  for (int i = 0; i < 8; ++i) out[i] = 0.5f * s[i] * p[i] + shift;
}

bool e8_is_lattice_point(const float* v) {
  // v - 1/4 in E8 = D8 u (D8 + 1/2): all integers or all halves, even sum.
  double x[8];
  for (int i = 0; i < 8; ++i) x[i] = double(v[i]) - 0.25;
  for (double off : {0.0, 0.5}) {
    bool ok = true;
    long long sum = 0;
    for (int i = 0; i < 8 && ok; ++i) {
      const double m = x[i] - off;
      ok = std::abs(m - std::round(m)) < 1e-6;
      sum += std::llround(m);
    }
    if (ok && sum % 2 == 0) return true;
  }
  return false;
}

uint16_t e8_encode(const float* w, float* err) {
  const Tables& t = tables();
  float best = INFINITY;
  uint16_t code = 0;
  for (int sh = 0; sh < 2; ++sh) {
    float z[8], zz = 0;
    for (int i = 0; i < 8; ++i) {
      z[i] = w[i] - (sh ? -0.25f : 0.25f);
      zz += z[i] * z[i];
    }
    // Nearest point of D8 + 1/2: each coordinate to its nearest odd half;
    // if the parity is wrong, the worst one to its other neighbour.
    int n[8], sum = 0, worst = 0;
    float worst_gap = -1;
    for (int i = 0; i < 8; ++i) {
      n[i] = static_cast<int>(std::floor(z[i]));
      sum += n[i];
      const float gap = std::fabs(z[i] - (n[i] + 0.5f));
      if (gap > worst_gap) { worst_gap = gap; worst = i; }
    }
    if (sum & 1) n[worst] += z[worst] > n[worst] + 0.5f ? 1 : -1;
    uint8_t v[8];
    bool small = true;
    for (int i = 0; i < 8; ++i) {
      const int a = std::abs(2 * n[i] + 1);
      small = small && a <= 5;
      v[i] = static_cast<uint8_t>(a);
    }
    const int entry = small ? t.index[key_of(v)] : -1;
    int pick = entry;
    int sign_bits = 0;
    float dist;
    if (entry >= 0) {
      dist = 0;
      for (int i = 0; i < 8; ++i) {
        const float e = z[i] - (n[i] + 0.5f);
        dist += e * e;
        if (2 * n[i] + 1 < 0 && i < 7) sign_bits |= 1 << i;
      }
    } else {
      // Outside the table: the best signs of every pattern.
      dist = INFINITY;
      for (int p = 0; p < 256; ++p) {
        const auto& a = t.pat[p];
        float score = 0, weakest = INFINITY;
        int parity = 0, wi = 0, bits = 0;
        for (int i = 0; i < 8; ++i) {
          const int s = z[i] < 0 ? -1 : 1;
          const float c = 0.5f * a[i] * std::fabs(z[i]);
          score += c;
          parity += half_int(s, a[i]);
          if (s < 0) bits |= 1 << i;
          if (c < weakest) { weakest = c; wi = i; }
        }
        if (parity & 1) { score -= 2 * weakest; bits ^= 1 << wi; }
        const float dd = zz + t.norm2[p] - 2 * score;
        if (dd < dist) { dist = dd; pick = p; sign_bits = bits & 0x7f; }
      }
    }
    if (dist < best) {
      best = dist;
      code = static_cast<uint16_t>(pick | sign_bits << 8 | sh << 15);
    }
  }
  if (err) *err = best;
  return code;
}

namespace {

class LatticeCodec final : public Codec {
 public:
  LatticeCodec(std::string_view name, int d, std::shared_ptr<const Rotation> rot)
      : Codec(std::string(name), d, FormatFamily::kTurbo) {
    rotation_ = std::move(rot);
    row_bytes_ = 2 + 2 * static_cast<size_t>(d / 8);
    layout_.kind = RowLayout::Kind::kOpaque;
    layout_.d = d;
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl) const override {
    double ss = 0;
    for (int i = 0; i < d_; ++i) ss += double(y[i]) * y[i];
    const double norm = std::sqrt(ss);
    if (!(norm < kUNormMax)) return Status::Error("norm " + std::to_string(norm) + " exceeds the norm range (4.29e9)");
    const float inv = norm > 0 ? static_cast<float>(std::sqrt(double(d_)) / norm / kE8Scale) : 0.0f;
    double num = 0, den = 0;
    for (int g = 0; g < d_ / 8; ++g) {
      float w[8], c[8];
      for (int i = 0; i < 8; ++i) w[i] = y[8 * g + i] * inv;
      const uint16_t code = e8_encode(w);
      out[2 + 2 * g] = static_cast<uint8_t>(code & 0xff);
      out[3 + 2 * g] = static_cast<uint8_t>(code >> 8);
      e8_decode(code, c);
      for (int i = 0; i < 8; ++i) {
        num += double(c[i]) * y[8 * g + i];
        den += double(c[i]) * c[i];
      }
    }
    // The stored scale makes the decoded row the least-squares fit of y.
    const float scale = den > 0 ? static_cast<float>(std::max(0.0, num / den)) : 0.0f;
    const uint16_t h = f32_to_unorm16(scale);
    std::memcpy(out, &h, 2);
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl) const override {
    uint16_t h;
    std::memcpy(&h, in, 2);
    const float scale = unorm16_to_f32(h);
    for (int g = 0; g < d_ / 8; ++g) {
      e8_decode(static_cast<uint16_t>(in[2 + 2 * g] | in[3 + 2 * g] << 8), out + 8 * g);
      for (int i = 0; i < 8; ++i) out[8 * g + i] *= scale;
    }
  }
};

}  // namespace

std::unique_ptr<Codec> make_lattice_codec(std::string_view name, int d, uint64_t seed) {
  if (name != "te8" || d % 8 != 0) return nullptr;
  auto rot = Rotation::make(d, seed);
  if (!rot) return nullptr;
  return std::make_unique<LatticeCodec>(name, d, *rot);
}

}  // namespace tkv
