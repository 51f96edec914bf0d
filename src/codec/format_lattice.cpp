// The E8 lattice format te8 (issue 20, docs/FORMATS.md §4g): after the tq
// rotation, each group of 8 coordinates of u = sqrt(d) y / |y| (unit
// variance) is coded by 16 bits as the nearest of 2^16 points of the shifted
// lattice E8 + 1/4 (codec/lattice.h), scaled by kE8Scale: 2 bits per
// coordinate. The row keeps one 16-bit scale, the least-squares fit of the
// decoded row to y (as ttB). Nearest point: Conway and Sloane's rounding for
// D8 + 1/2 in each half of the coset, which is the answer whenever the
// rounded point is in the table; otherwise the best sign pattern of each of
// the 256 absolute-value patterns (a search only rows with outliers need).
// The attention kernels read rows in place (RowLayout kind kE8, kE8Tables).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "codec/format.h"
#include "codec/kernels.h"
#include "codec/lattice.h"
#include "util/fp16.h"

namespace tkv {
namespace {

// Absolute-value patterns as odd integers 2|y_i| in {1, 3, 5}.
struct Tables {
  std::array<std::array<uint8_t, 8>, 256> pat;
  std::array<float, 256> norm2;   // |pattern|^2 in lattice units
  std::vector<int16_t> index;     // base-3 key of a pattern -> its entry, or -1
  float half[8][256];             // pattern values (lattice units), coordinate-major for the search
};

// An entry's parity of 3/2 values: its top bit (the table's order).
inline int threes_parity(int entry) { return entry >> 7; }

int key_of(const uint8_t* v) {
  int k = 0;
  for (int i = 0; i < 8; ++i) k = k * 3 + (v[i] - 1) / 2;
  return k;
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t{};
    t.index.assign(6561, -1);
    // Every pattern of squared norm <= 10 (227: 107 with an even number of
    // 3/2 values, 120 odd), then of squared norm 12 the first 21 (key order)
    // with one 5/2 and two 3/2 (even) and the first 8 with five 3/2 (odd):
    // 128 even-parity entries, then 128 odd, each part by norm and key, so
    // that an entry's parity is its top bit (the attention kernels read the
    // sign of coordinate 7 without a table of parities).
    std::vector<std::array<uint8_t, 8>> even, odd;
    int even12 = 0, odd12 = 0;
    for (int k = 0; k < 6561; ++k) {
      std::array<uint8_t, 8> v{};
      int r = k, n4 = 0;  // 4 |y|^2
      for (int i = 7; i >= 0; --i) {
        v[i] = static_cast<uint8_t>(2 * (r % 3) + 1);
        r /= 3;
        n4 += v[i] * v[i];
      }
      const int threes = static_cast<int>(std::count(v.begin(), v.end(), 3));
      const bool take = n4 <= 40 || (n4 == 48 && threes == 2 && even12++ < 21) ||
                        (n4 == 48 && threes == 5 && odd12++ < 8);
      if (take) (threes % 2 ? odd : even).push_back(v);
    }
    auto by_norm = [](const auto& a, const auto& b) {
      int na = 0, nb = 0;
      for (int i = 0; i < 8; ++i) { na += a[i] * a[i]; nb += b[i] * b[i]; }
      return na < nb;
    };
    std::stable_sort(even.begin(), even.end(), by_norm);
    std::stable_sort(odd.begin(), odd.end(), by_norm);
    if (even.size() != 128 || odd.size() != 128) std::abort();  // the parity is the top bit
    int e = 0;
    for (const auto& v : even) t.pat[e++] = v;
    for (const auto& v : odd) t.pat[e++] = v;
    for (int i = 0; i < 256; ++i) {
      float n2 = 0;
      for (int j = 0; j < 8; ++j) n2 += 0.25f * t.pat[i][j] * t.pat[i][j];
      t.norm2[i] = n2;
      t.index[key_of(t.pat[i].data())] = static_cast<int16_t>(i);
      for (int j = 0; j < 8; ++j) t.half[j][i] = 0.5f * t.pat[i][j];
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

namespace {

// The nearest point of D8 + 1/2 to z (Conway and Sloane: each coordinate to
// its nearest odd half; if the coordinates minus 1/2 sum to an odd integer,
// the farthest one to its other neighbour), as n_i = y_i - 1/2; returns
// the squared distance.
float nearest_d8_half(const float* z, int* n) {
  int sum = 0, worst = 0;
  float worst_gap = -1;
  for (int i = 0; i < 8; ++i) {
    n[i] = static_cast<int>(std::floor(z[i]));
    sum += n[i];
    const float gap = std::fabs(z[i] - (n[i] + 0.5f));
    if (gap > worst_gap) { worst_gap = gap; worst = i; }
  }
  if (sum & 1) n[worst] += z[worst] > n[worst] + 0.5f ? 1 : -1;
  float dist = 0;
  for (int i = 0; i < 8; ++i) dist += (z[i] - (n[i] + 0.5f)) * (z[i] - (n[i] + 0.5f));
  return dist;
}

}  // namespace

uint16_t e8_encode(const float* w, float* err) {
  const Tables& t = tables();
  float z[2][8], zz[2] = {0, 0}, dist[2];
  int n[2][8];
  for (int sh = 0; sh < 2; ++sh) {
    for (int i = 0; i < 8; ++i) {
      z[sh][i] = w[i] - (sh ? -0.25f : 0.25f);
      zz[sh] += z[sh][i] * z[sh][i];
    }
    dist[sh] = nearest_d8_half(z[sh], n[sh]);
  }
  // Shifts in order of their unrestricted nearest distance, a lower bound of
  // what the table can do: a shift whose bound is no better than the best
  // point found is skipped.
  const int order[2] = {dist[1] < dist[0] ? 1 : 0, dist[1] < dist[0] ? 0 : 1};
  float best = INFINITY;
  uint16_t code = 0;
  for (int sh : order) {
    if (dist[sh] >= best) break;
    uint8_t v[8];
    bool small = true;
    for (int i = 0; i < 8; ++i) {
      const int a = std::abs(2 * n[sh][i] + 1);
      small = small && a <= 5;
      v[i] = static_cast<uint8_t>(a);
    }
    const int entry = small ? t.index[key_of(v)] : -1;
    if (entry >= 0) {  // the nearest lattice point is in the table
      int sign_bits = 0;
      for (int i = 0; i < 7; ++i)
        if (2 * n[sh][i] + 1 < 0) sign_bits |= 1 << i;
      best = dist[sh];
      code = static_cast<uint16_t>(entry | sign_bits << 8 | sh << 15);
      continue;
    }
    // Outside the table: the best signs of every pattern. With signs from
    // z, y = s (.) a is in D8 + 1/2 when the number of 3/2 values plus the
    // number of negative signs is even (y_i - 1/2 is odd exactly for +3/2,
    // -1/2 and -5/2); otherwise the sign of the weakest term a_i |z_i|
    // flips. Distances for all 256 in one vectorizable pass, then the least.
    const float* zs = z[sh];
    float az[8];
    int neg = 0;
    for (int i = 0; i < 8; ++i) {
      az[i] = std::fabs(zs[i]);
      neg += zs[i] < 0;
    }
    float dd[256], weak[256];
    for (int p = 0; p < 256; ++p) {
      dd[p] = 0.0f;
      weak[p] = INFINITY;
    }
    for (int i = 0; i < 8; ++i)  // patterns innermost: contiguous, vectorized
      for (int p = 0; p < 256; ++p) {
        const float c = t.half[i][p] * az[i];
        dd[p] += c;
        weak[p] = weak[p] < c ? weak[p] : c;
      }
    for (int p = 0; p < 256; ++p) {
      const float fix = ((threes_parity(p) + neg) & 1) ? 2 * weak[p] : 0.0f;
      dd[p] = zz[sh] + t.norm2[p] - 2 * (dd[p] - fix);
    }
    int pick = 0;
    for (int p = 1; p < 256; ++p)
      if (dd[p] < dd[pick]) pick = p;
    if (dd[pick] < best) {
      int bits = 0, wi = 0;
      float weakest = INFINITY;
      for (int i = 0; i < 8; ++i) {
        if (zs[i] < 0) bits |= 1 << i;
        const float c = t.half[i][pick] * az[i];
        if (c < weakest) { weakest = c; wi = i; }
      }
      if ((threes_parity(pick) + neg) & 1) bits ^= 1 << wi;
      best = dd[pick];
      code = static_cast<uint16_t>(pick | (bits & 0x7f) << 8 | sh << 15);
    }
  }
  if (err) *err = best;
  return code;
}

const E8Tables kE8Tables = [] {
  E8Tables e{};
  const Tables& t = tables();
  for (int p = 0; p < 256; ++p)
    for (int i = 0; i < 8; ++i) e.values[p][i] = 0.5f * t.pat[p][i];
  for (int th = 0; th < 2; ++th)  // coordinate 7 negative when the parities differ
    for (int m = 0; m < 128; ++m) {
      const int full = m | ((th + __builtin_popcount(m)) & 1) << 7;
      for (int i = 0; i < 8; ++i) e.signs[th][m][i] = (full >> i) & 1 ? 0x80000000u : 0u;
    }
  return e;
}();

namespace {

class LatticeCodec final : public Codec {
 public:
  LatticeCodec(std::string_view name, int d, std::shared_ptr<const Rotation> rot)
      : Codec(std::string(name), d, FormatFamily::kTurbo) {
    rotation_ = std::move(rot);
    row_bytes_ = 2 + 2 * static_cast<size_t>(d / 8);
    layout_.kind = RowLayout::Kind::kE8;
    layout_.d = d;
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl) const override {
    const auto unit = unit_scale(y, d_);
    if (!unit) return unit.status();
    const float inv = static_cast<float>(*unit / kE8Scale);
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
