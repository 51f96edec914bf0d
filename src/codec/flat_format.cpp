#include "codec/flat_format.h"

#include <algorithm>
#include <string>

#include "codec/codebook.h"
#include "codec/kernels.h"

namespace tkv {
namespace {

int append(std::vector<float>& tables, const float* v, size_t n) {
  const int off = static_cast<int>(tables.size());
  tables.insert(tables.end(), v, v + n);
  return off;
}

bool ends_with(const std::string& s, const char* tail) {
  const std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

Expected<FlatFormat> flatten_codec(const Codec& codec, std::vector<float>& tables) {
  FlatFormat f;
  const RowLayout& lay = codec.layout();
  f.d = codec.dim();
  f.row_bytes = static_cast<uint32_t>(codec.row_bytes());
  switch (lay.kind) {
    case RowLayout::Kind::kF32: f.kind = FlatFormat::kF32; break;
    case RowLayout::Kind::kF16: f.kind = FlatFormat::kF16; break;
    case RowLayout::Kind::kBF16: f.kind = FlatFormat::kBF16; break;
    case RowLayout::Kind::kQ8_0: f.kind = FlatFormat::kQ8_0; break;
    case RowLayout::Kind::kQ4_0: f.kind = FlatFormat::kQ4_0; break;
    case RowLayout::Kind::kTurbo:
      f.kind = codec.family() == FormatFamily::kCalibrated ? FlatFormat::kCalibrated : FlatFormat::kTurbo;
      break;
    case RowLayout::Kind::kE8:
    case RowLayout::Kind::kTrellis:
    case RowLayout::Kind::kOpaque:
      return Status::Error("format " + codec.name() +
                           " has no flat row program (QJL, trellis and lattice rows are not on the GPU)");
  }
  if (f.kind == FlatFormat::kTurbo && codec.family() != FormatFamily::kTurbo)
    return Status::Error("format " + codec.name() + ": unexpected code layout for a flat row program");
  if (ends_with(codec.name(), "-nc")) f.norm = FlatFormat::kCorrect;
  if (ends_with(codec.name(), "-ip")) f.norm = FlatFormat::kUnbiased;

  if (const Rotation* r = codec.rotation()) {
    if (r->hadamard()) {
      f.rot = FlatFormat::kHadamard;
      f.rot_scale = r->hadamard_scale();
      f.sign = append(tables, r->hadamard_signs().data(), r->hadamard_signs().size());
    } else {
      f.rot = FlatFormat::kDense;
      f.cols = append(tables, r->dense_columns().data(), r->dense_columns().size());
      f.rows = append(tables, r->dense_rows().data(), r->dense_rows().size());
    }
  }

  if (f.kind == FlatFormat::kTurbo || f.kind == FlatFormat::kCalibrated) {
    std::vector<float> inv(f.d, 0.0f);
    f.used_bytes = 2;
    f.nparts = lay.nparts;
    for (int p = 0; p < lay.nparts; ++p) {
      const RowLayout::Part& src = lay.parts[p];
      FlatPart& dst = f.parts[p];
      dst.begin = src.begin;
      dst.count = src.count;
      dst.bits = src.bits;
      dst.nplanes = src.nplanes;
      for (int k = 0; k < src.nplanes; ++k) {
        dst.width[k] = src.planes[k].width;
        dst.shift[k] = src.planes[k].shift;
        dst.offset[k] = static_cast<uint32_t>(src.planes[k].offset);
        f.used_bytes = std::max<uint32_t>(
            f.used_bytes, dst.offset[k] + static_cast<uint32_t>(plane_bytes(src.count, src.planes[k].width)));
      }
      // The codebook the codec encodes with: the sphere density of dimension
      // d for tq, the unit Gaussian for tqc (calibrated.h).
      const Codebook& cb = f.kind == FlatFormat::kTurbo ? lloyd_max(f.d, src.bits)
                                                        : lloyd_max(1, src.bits, Density::kGaussian);
      if (cb.centroids_f.data() != src.centroids)
        return Status::Error("format " + codec.name() + ": part " + std::to_string(p) +
                             " does not use the codebook its family encodes with");
      dst.cent = append(tables, cb.centroids_f.data(), cb.centroids_f.size());
      dst.bnd = append(tables, cb.boundaries_f.data(), cb.boundaries_f.size());
      if (const float* s = codec.coord_scale())
        for (int i = src.begin; i < src.begin + src.count; ++i) inv[i] = 1.0f / s[i];
    }
    if (const float* s = codec.coord_scale()) {
      f.coord_scale = append(tables, s, f.d);
      f.inv_sigma = append(tables, inv.data(), inv.size());
    }
  }
  return f;
}

}  // namespace tkv
