#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "codec/calibrated.h"
#include "codec/trellis.h"
#include "codec/codebook.h"
#include "codec/eigen.h"
#include "codec/kernels.h"
#include "util/fp16.h"

namespace tkv {
namespace {

// Expected squared error of a unit Gaussian coded at b bits (b = 0: nothing coded).
double gauss_mse(int b) { return b == 0 ? 1.0 : lloyd_max(1, b, Density::kGaussian).mse_coord; }

class CalibratedCodec final : public Codec {
 public:
  CalibratedCodec(std::string name, int d, int total_bits, std::vector<int> bits, std::vector<float> sigma,
                  std::shared_ptr<const Rotation> rot)
      : Codec(std::move(name), d, FormatFamily::kCalibrated), bits_(std::move(bits)) {
    rotation_ = std::move(rot);
    coord_scale_ = std::move(sigma);
    layout_.kind = RowLayout::Kind::kTurbo;
    layout_.d = d;
    size_t off = 2;
    for (int i = 0; i < d;) {
      int j = i;
      while (j < d && bits_[j] == bits_[i]) ++j;
      if (bits_[i] > 0) {
        RowLayout::Part& part = layout_.parts[layout_.nparts++];
        part.begin = i;
        part.count = j - i;
        part.bits = bits_[i];
        part.centroids = lloyd_max(1, bits_[i], Density::kGaussian).centroids_f.data();
        int shift = 0;
        for (int width : plane_widths(part.bits)) {
          part.planes[part.nplanes++] = {width, shift, off};
          off += plane_bytes(part.count, width);
          shift += width;
        }
      }
      i = j;
    }
    // Fixed size whatever the allocation (every head of a layer must match):
    // groups left without bits (zero variance) leave zero bytes at the end.
    row_bytes_ = 2 + static_cast<size_t>(total_bits) / 8;
    used_bytes_ = off;
    inv_sigma_.resize(d);
    for (int i = 0; i < d; ++i) inv_sigma_[i] = bits_[i] > 0 ? 1.0f / coord_scale_[i] : 0.0f;
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl impl) const override {
    double ss = 0;
    int n = 0;
    for (int i = 0; i < d_; ++i) {
      y[i] *= inv_sigma_[i];  // whitened z_i (0 for uncoded components)
      if (bits_[i] > 0) { ss += static_cast<double>(y[i]) * y[i]; ++n; }
    }
    const double s = n > 0 ? std::sqrt(ss / n) : 0.0;
    if (!(s < kUNormMax)) return Status::Error("row scale " + std::to_string(s) + " exceeds the tqc range (4.29e9)");
    const float sf = static_cast<float>(s);
    const float inv = recip_or_zero(sf);
    uint8_t codes[1024];
    auto enc = impl == Impl::kRef ? ref::encode_cells : simd::encode_cells;
    for (int pi = 0; pi < layout_.nparts; ++pi) {
      const RowLayout::Part& part = layout_.parts[pi];
      const Codebook& cb = lloyd_max(1, part.bits, Density::kGaussian);
      enc(y + part.begin, part.count, inv, cb.boundaries_f.data(), static_cast<int>(cb.boundaries_f.size()),
          codes + part.begin);
      for (int k = 0; k < part.nplanes; ++k)
        pack_plane(codes + part.begin, part.count, part.planes[k].width, part.planes[k].shift,
                   out + part.planes[k].offset);
    }
    // Stored scale: the least-squares fit of the decoded row to y given the
    // codes, min over t of sum sigma_i^2 (z_i - t c_i)^2 (the error in the
    // original domain). Equals s when the variances are right; corrects rows
    // that the calibration over- or under-estimates.
    double zc = 0, cc = 0;
    for (int pi = 0; pi < layout_.nparts; ++pi) {
      const RowLayout::Part& part = layout_.parts[pi];
      for (int i = part.begin; i < part.begin + part.count; ++i) {
        const double v = static_cast<double>(coord_scale_[i]) * coord_scale_[i];
        const double c = part.centroids[codes[i]];
        zc += v * y[i] * c;
        cc += v * c * c;
      }
    }
    if (row_bytes_ > used_bytes_) std::memset(out + used_bytes_, 0, row_bytes_ - used_bytes_);
    const double t = cc > 0 && zc > 0 ? zc / cc : s;
    if (!(t < kUNormMax)) return Status::Error("row scale " + std::to_string(t) + " exceeds the tqc range (4.29e9)");
    const uint16_t h = f32_to_unorm16(static_cast<float>(t));
    std::memcpy(out, &h, 2);
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl impl) const override {
    uint16_t h;
    std::memcpy(&h, in, 2);
    const float scale = unorm16_to_f32(h);
    std::memset(out, 0, sizeof(float) * d_);
    uint8_t codes[1024];
    auto dec = impl == Impl::kRef ? ref::decode_cells : simd::decode_cells;
    for (int pi = 0; pi < layout_.nparts; ++pi) {
      const RowLayout::Part& part = layout_.parts[pi];
      std::memset(codes + part.begin, 0, part.count);
      for (int k = 0; k < part.nplanes; ++k)
        unpack_plane_or(in + part.planes[k].offset, part.count, part.planes[k].width, part.planes[k].shift,
                        codes + part.begin);
      dec(codes + part.begin, part.count, part.centroids, scale, out + part.begin);
    }
  }

 private:
  std::vector<int> bits_;
  std::vector<float> inv_sigma_;
  size_t used_bytes_ = 0;  // scale + planes; the rest of the row is zero
};

// ttcB (issue 20): tqcB's basis, whitening and widths, the whitened
// components coded by the bitshift trellis of the ttB formats (FORMATS §4f)
// instead of one Lloyd-Max code each: one stream of the coded components'
// w_i-bit codes (w_i the allocation's width, capped at 4; components of width 0 are
// skipped and decode to 0), after the 16-bit row scale. Attention reads the
// rows in place (RowLayout kind kTrellis) and folds sigma in as for tqc.
class TrellisCalibratedCodec final : public Codec {
 public:
  TrellisCalibratedCodec(std::string name, int d, int total_bits, const std::vector<int>& bits,
                         std::vector<float> sigma, std::shared_ptr<const Rotation> rot)
      : Codec(std::move(name), d, FormatFamily::kCalibrated) {
    rotation_ = std::move(rot);
    coord_scale_ = std::move(sigma);
    layout_.d = d;
    for (int i = 0; i < d; ++i)
      if (bits[i] > 0) {
        coded_.push_back(i);
        widths_.push_back(static_cast<uint8_t>(bits[i]));
        tables_.push_back(trellis_table(bits[i]).data());
      }
    row_bytes_ = 2 + static_cast<size_t>(total_bits) / 8;
    trellis_layout(widths_.data(), coded_.data(), static_cast<int>(coded_.size()), layout_);
  }

 protected:
  Status encode_row(float* y, uint8_t* out, Impl) const override {
    const int n = static_cast<int>(coded_.size());
    std::vector<float> z(n);
    double ss = 0;
    for (int k = 0; k < n; ++k) {
      z[k] = y[coded_[k]] / coord_scale_[coded_[k]];  // whitened
      ss += double(z[k]) * z[k];
    }
    const double s = n > 0 ? std::sqrt(ss / n) : 0.0;
    if (!(s < kUNormMax)) return Status::Error("row scale " + std::to_string(s) + " exceeds the ttc range (4.29e9)");
    const float inv = recip_or_zero(static_cast<float>(s));
    std::vector<float> u(n);
    for (int k = 0; k < n; ++k) u[k] = z[k] * inv;
    std::vector<uint8_t> codes(n);
    if (n > 0) trellis_viterbi(u.data(), n, widths_.data(), tables_.data(), codes.data());
    // Stored scale: the least-squares fit in the original domain, as tqc's.
    double zc = 0, cc = 0;
    for (int k = 0, st = 0; k < n; ++k) {
      st = ((st << widths_[k]) | codes[k]) & (kTrellisStates - 1);
      const double v = double(coord_scale_[coded_[k]]) * coord_scale_[coded_[k]], c = tables_[k][st];
      zc += v * z[k] * c;
      cc += v * c * c;
    }
    const double t = cc > 0 && zc > 0 ? zc / cc : s;
    if (!(t < kUNormMax)) return Status::Error("row scale " + std::to_string(t) + " exceeds the ttc range (4.29e9)");
    const uint16_t h = f32_to_unorm16(static_cast<float>(t));
    std::memcpy(out, &h, 2);
    std::memset(out + 2, 0, row_bytes_ - 2);
    trellis_pack(codes.data(), widths_.data(), n, out + 2);
    return Status::Ok();
  }

  void decode_row(const uint8_t* in, float* out, Impl) const override {
    uint16_t h;
    std::memcpy(&h, in, 2);
    const int n = static_cast<int>(coded_.size());
    float v[1024];
    trellis_unpack(in + 2, widths_.data(), tables_.data(), n, unorm16_to_f32(h), v);
    std::memset(out, 0, sizeof(float) * d_);
    for (int k = 0; k < n; ++k) out[coded_[k]] = v[k];
  }

 private:
  std::vector<int> coded_;        // the components with bits, ascending
  std::vector<uint8_t> widths_;   // their widths (1..4)
  std::vector<const float*> tables_;
};

}  // namespace

Expected<HeadBasis> fit_head_basis(const float* x, size_t n, int d) {
  if (d < 1 || d > 1024) return Status::Error("calibration: head dim " + std::to_string(d) + " outside [1, 1024]");
  if (n < 2) return Status::Error("calibration: need at least 2 rows, got " + std::to_string(n));
  const size_t D = static_cast<size_t>(d);
  std::vector<double> mean(D, 0.0);
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < D; ++i) {
      const float v = x[t * D + i];
      if (!std::isfinite(v))
        return Status::Error("calibration: row " + std::to_string(t) + " element " + std::to_string(i) +
                             " is not finite");
      mean[i] += v;
    }
  for (double& m : mean) m /= static_cast<double>(n);
  std::vector<double> cov(D * D, 0.0), c(D);
  for (size_t t = 0; t < n; ++t) {
    for (size_t i = 0; i < D; ++i) c[i] = x[t * D + i] - mean[i];
    for (size_t i = 0; i < D; ++i)
      for (size_t j = i; j < D; ++j) cov[i * D + j] += c[i] * c[j];
  }
  for (size_t i = 0; i < D; ++i)
    for (size_t j = i; j < D; ++j) cov[j * D + i] = cov[i * D + j] /= static_cast<double>(n);
  // Shrinkage for small calibration sets (n not much above d, where the
  // sample covariance is singular and its small eigenvalues are noise):
  // 1. off-diagonal entries towards 0 (Schafer & Strimmer's target D): per-
  //    channel variances are estimated well from few rows, correlations not;
  //    lambda = sum Var(s_ij) / sum s_ij^2 over i != j, estimated from the rows;
  // 2. eigenvalues towards their mean with weight 0.3 min(1, d/n), so no
  //    direction is coded as if it were empty (Ledoit-Wolf's own weight, 0.6
  //    to 1 on 49 Qwen3.5 keys, shrank too far: measured in docs/RESULTS.md).
  // Both weights vanish as n grows.
  double num = 0, den = 0;
  {
    std::vector<double> w2(D * D, 0.0);
    for (size_t t = 0; t < n; ++t) {
      for (size_t i = 0; i < D; ++i) c[i] = x[t * D + i] - mean[i];
      for (size_t i = 0; i < D; ++i)
        for (size_t j = i + 1; j < D; ++j) w2[i * D + j] += std::pow(c[i] * c[j] - cov[i * D + j], 2);
    }
    const double nn = static_cast<double>(n);
    for (size_t i = 0; i < D; ++i)
      for (size_t j = i + 1; j < D; ++j) {
        num += w2[i * D + j] / (nn * (nn - 1.0));  // variance of the mean of n products
        den += cov[i * D + j] * cov[i * D + j];
      }
  }
  double lambda = den > 0 ? std::min(1.0, num / den) : 0.0;
  for (size_t i = 0; i < D; ++i)
    for (size_t j = 0; j < D; ++j)
      if (i != j) cov[i * D + j] *= 1.0 - lambda;
  double mu_tr = 0;
  for (size_t i = 0; i < D; ++i) mu_tr += cov[i * D + i];
  mu_tr /= static_cast<double>(D);
  const double alpha = 0.3 * std::min(1.0, static_cast<double>(D) / static_cast<double>(n));
  const SymEigen e = sym_eigen(cov, d);
  HeadBasis b;
  b.d = d;
  b.mean.assign(mean.begin(), mean.end());
  b.basis.assign(e.vectors.begin(), e.vectors.end());
  b.var.resize(D);
  for (size_t i = 0; i < D; ++i)
    b.var[i] = static_cast<float>((1.0 - alpha) * std::max(0.0, e.values[i]) + alpha * mu_tr);
  b.shrink_offdiag = lambda;
  b.shrink_mean = alpha;
  return b;
}

HeadBasis synthetic_head_basis(int d, uint64_t seed) {
  HeadBasis b;
  b.d = d;
  b.mean.assign(d, 0.0f);
  b.basis.resize(static_cast<size_t>(d) * d);
  // The rows of a seeded rotation (randomized Hadamard or dense Haar).
  const auto rot = Rotation::make(d, seed);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) b.basis[static_cast<size_t>(i) * d + j] = static_cast<float>((*rot)->entry(i, j));
  b.var.resize(d);
  for (int i = 0; i < d; ++i) b.var[i] = static_cast<float>(std::exp2(-4.0 * i / d));
  return b;
}

std::vector<int> allocate_bits(const std::vector<float>& var, int total_bits, int group, int max_bits) {
  const int d = static_cast<int>(var.size());
  std::vector<int> bits(d, 0);
  if (group < 1) group = 1;
  const int ng = (d + group - 1) / group;
  std::vector<double> gvar(ng, 0.0);
  std::vector<int> gsize(ng, 0);
  for (int i = 0; i < d; ++i) { gvar[i / group] += var[i]; ++gsize[i / group]; }
  std::vector<int> gb(ng, 0);
  int left = total_bits;
  for (;;) {
    int best = -1;
    double best_gain = 0;
    for (int g = 0; g < ng; ++g) {
      if (gb[g] >= max_bits || gsize[g] > left) continue;
      const double gain = gvar[g] * (gauss_mse(gb[g]) - gauss_mse(gb[g] + 1));
      if (gain > best_gain) { best_gain = gain; best = g; }  // ties: lowest index
    }
    if (best < 0) break;
    ++gb[best];
    left -= gsize[best];
  }
  for (int i = 0; i < d; ++i) bits[i] = gb[i / group];
  return bits;
}

bool is_calibrated_format(std::string_view name) {
  return name.size() > 3 && (name.substr(0, 3) == "tqc" || name.substr(0, 3) == "ttc");
}

Expected<double> calibrated_bits(std::string_view name, int d) {
  if (!is_calibrated_format(name)) return Status::Error("not a calibrated format: '" + std::string(name) + "'");
  const std::string num(name.substr(3));
  char* end = nullptr;
  const double b = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || !(b > 0.0) || b > 8.0)
    return Status::Error("format " + std::string(name) + ": " + std::string(name.substr(0, 3)) +
                         "B needs B, the bits per coordinate, in (0, 8]");
  // Whole bytes per row, and runs of whole bytes per plane (groups of 8 or 16
  // components): B·d a multiple of 8 bits, d a multiple of 8.
  const double total = b * d;
  if (d % 8 != 0)
    return Status::Error("format " + std::string(name) + ": calibrated formats need a head dim that is a multiple of 8, got " +
                         std::to_string(d));
  // Names print B with 6 significant digits (tqc1.33333 at d = 96 means 128
  // bits): totals within 0.01 of a whole number are that number.
  if (std::fabs(total - std::round(total)) > 0.01 || std::lround(total) % 8 != 0) {
    char step[32];
    std::snprintf(step, sizeof(step), "%g", 8.0 / d);
    return Status::Error("format " + std::string(name) + ": " + num + " bits x head dim " + std::to_string(d) +
                         " is not a whole number of bytes (B must be a multiple of " + step + ")");
  }
  return b;
}

std::string calibrated_format_name(double bits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "tqc%g", bits);
  return buf;
}

Expected<CalibratedAllocation> calibrated_allocation(std::string_view name, const HeadBasis& basis) {
  const int d = basis.d;
  auto b = calibrated_bits(name, d);
  if (!b) return b.status();
  if (basis.var.size() != static_cast<size_t>(d) || basis.basis.size() != static_cast<size_t>(d) * d)
    return Status::Error("format " + std::string(name) + ": basis does not match head dim " + std::to_string(d));
  for (int i = 0; i < d; ++i)
    if (!(basis.var[i] >= 0.0f) || !std::isfinite(basis.var[i]))
      return Status::Error("format " + std::string(name) + ": component " + std::to_string(i) + " has variance " +
                           std::to_string(basis.var[i]));
  CalibratedAllocation a;
  a.total_bits = static_cast<int>(std::lround(*b * d));
  a.group = (d % 16 == 0 && a.total_bits % 16 == 0) ? 16 : 8;
  // ttc: the trellis tables go to 4 bits, so no component gets more.
  const int max_bits = name.substr(0, 3) == "ttc" ? 4 : 8;
  if (a.total_bits > max_bits * d)
    return Status::Error("format " + std::string(name) + ": the trellis codes at most 4 bits per coordinate");
  a.bits = allocate_bits(basis.var, a.total_bits, a.group, max_bits);
  return a;
}

Expected<std::unique_ptr<Codec>> make_calibrated_codec(std::string_view name, const HeadBasis& basis) {
  const int d = basis.d;
  auto alloc = calibrated_allocation(name, basis);
  if (!alloc) return alloc.status();
  const int total = alloc->total_bits;
  std::vector<int> bits = std::move(alloc->bits);
  std::vector<float> sigma(d);
  for (int i = 0; i < d; ++i) sigma[i] = bits[i] > 0 ? std::sqrt(basis.var[i]) : 0.0f;
  std::vector<float> rows = basis.basis;
  {
    // Components sharing a bit width are mixed by a seeded random rotation:
    // the expected error is the same (equal bits, total variance kept), but
    // each coded coordinate becomes a blend of many components, so errors in
    // individual variance estimates and non-Gaussian shapes average out.
    for (int i = 0; i < d;) {
      int j = i;
      while (j < d && bits[j] == bits[i]) ++j;
      const int len = j - i;
      if (bits[i] > 0 && len >= 2) {
        auto q = Rotation::make(len, kDefaultSeed + static_cast<uint64_t>(i));
        if (!q) return Status::Error("format " + std::string(name) + ": " + q.error());
        double v = 0;
        for (int k = i; k < j; ++k) v += basis.var[k];
        const float s = static_cast<float>(std::sqrt(v / len));
        for (int r = 0; r < len; ++r) {
          sigma[i + r] = s;
          for (int col = 0; col < d; ++col) {
            double acc = 0;
            for (int k = 0; k < len; ++k)
              acc += (*q)->entry(r, k) * basis.basis[static_cast<size_t>(i + k) * d + col];
            rows[static_cast<size_t>(i + r) * d + col] = static_cast<float>(acc);
          }
        }
      }
      i = j;
    }
  }
  // Runs of equal widths: a greedy allocation is monotone in the variance
  // order, so at most 8 of them.
  int runs = 0;
  for (int i = 0; i < d; ++i)
    if (bits[i] > 0 && (i == 0 || bits[i] != bits[i - 1])) ++runs;
  if (runs > RowLayout::kMaxParts)
    return Status::Error("format " + std::string(name) + ": variances are not sorted (" + std::to_string(runs) +
                         " runs of bit widths)");
  auto rot = Rotation::from_matrix(d, rows);
  if (!rot) return Status::Error("format " + std::string(name) + ": " + rot.error());
  if (name.substr(0, 3) == "ttc") {
    return std::unique_ptr<Codec>(new TrellisCalibratedCodec(std::string(name), d, total, bits, std::move(sigma), *rot));
  }
  return std::unique_ptr<Codec>(new CalibratedCodec(std::string(name), d, total, std::move(bits), std::move(sigma), *rot));
}

}  // namespace tkv
