#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "codec/format.h"
#include "codec/kernels.h"

namespace tkv {

Status Codec::quantize(const float* x, size_t n, uint8_t* out, Impl impl) const {
  // Stack buffer (d <= 1024): a per-call allocation would cost as much as a row.
  alignas(64) float rot[1024 + kRowPad];
  std::memset(rot + d_, 0, sizeof(float) * (padded(d_) - d_));  // kernels may read the padding
  for (size_t r = 0; r < n; ++r) {
    const float* row = x + r * d_;
    size_t bad = 0;
    if (!all_finite(row, d_, &bad)) {
      std::ostringstream os;
      os << name_ << ": row " << r << " element " << bad << " is " << row[bad]
         << " (NaN or Inf cannot be stored)";
      return Status::Error(os.str());
    }
    if (rotation_) {
      rotation_->forward(row, rot, impl);
    } else {
      std::memcpy(rot, row, sizeof(float) * d_);
    }
    Status s = encode_row(rot, out + r * row_bytes_, impl);
    if (!s.ok()) return Status::Error(name_ + ": row " + std::to_string(r) + ": " + s.message());
  }
  return Status::Ok();
}

void Codec::dequantize(const uint8_t* in, size_t n, float* out, Impl impl) const {
  alignas(64) float tmp[1024 + kRowPad];
  for (size_t r = 0; r < n; ++r) {
    if (rotation_) {
      decode_rotated(in + r * row_bytes_, tmp, impl);
      rotation_->inverse(tmp, out + r * d_, impl);
    } else {
      decode_row(in + r * row_bytes_, out + r * d_, impl);
    }
  }
}

Expected<std::unique_ptr<Codec>> make_codec(std::string_view name, int d, uint64_t seed) {
  // Plain formats take any head dim; coded ones need enough coordinates for
  // their blocks and rotations to make sense.
  const bool plain = name == "f32" || name == "f16" || name == "bf16";
  if (d < (plain ? 1 : 8) || d > 1024)
    return Status::Error("format " + std::string(name) + ": head dim " + std::to_string(d) +
                         " is outside the supported range [" + (plain ? "1" : "8") + ", 1024]");
  std::unique_ptr<Codec> c;
  if (name == "f32" || name == "f16" || name == "bf16") {
    c = make_plain_codec(name, d);
  } else if (name == "q8_0" || name == "q4_0" || name == "q8_0r" || name == "q4_0r") {
    c = make_llama_codec(name, d, seed);
  } else if (name.substr(0, 3) == "tqc" || name.substr(0, 3) == "ttc") {
    return Status::Error("format " + std::string(name) +
                         ": calibrated formats need a calibration (a policy from `turbokv calibrate`, "
                         "or kv-stats --calibrated)");
  } else if (name == "te8") {
    if (d % 8 != 0)
      return Status::Error("format te8: head dim " + std::to_string(d) + " is not a multiple of 8 (the E8 groups)");
    c = make_lattice_codec(name, d, seed);
  } else if (name.substr(0, 2) == "tt") {
    c = make_trellis_codec(name, d, seed);
  } else if (name.substr(0, 2) == "tq" && name.size() > 4 && name.substr(name.size() - 4) == "-qjl") {
    c = make_qjl_codec(name, d, seed);
  } else if (name.substr(0, 2) == "tq") {
    c = make_turbo_codec(name, d, seed);
  }
  if (!c) {
    std::string known;
    for (const auto& n : all_format_names()) known += (known.empty() ? "" : " ") + n;
    return Status::Error("unknown KV format '" + std::string(name) + "' (known: " + known +
                         ", and tq1..tq8, tq1.5..tq7.5 with optional -nc or -ip, then optional -qjl; tt1..tt4, tt1.5..tt3.5; te8)");
  }
  return c;
}

const std::vector<std::string>& all_format_names() {
  static const std::vector<std::string> names = {
      "f32",  "f16",   "bf16", "q8_0",  "q8_0r", "q4_0", "q4_0r",  "tq1",    "tq2",
      "tq2.5", "tq3",  "tq3.5", "tq4",  "tq4.5", "tq5",  "tq6",    "tq7",    "tq8",
      "tq2-nc", "tq3-nc", "tq4-nc", "tq2-ip", "tq3-ip", "tq4-ip"};
  return names;
}

Expected<std::vector<std::string>> parse_format_list(std::string_view list) {
  if (list == "all") return all_format_names();
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string item(list.substr(pos, comma - pos));
    if (item.empty()) return Status::Error("empty format name in list '" + std::string(list) + "'");
    if (item.size() > 3 && (item.substr(0, 3) == "tqc" || item.substr(0, 3) == "ttc")) {  // needs a calibration; checked where it is built
      char* end = nullptr;
      const double b = std::strtod(item.c_str() + 3, &end);
      if (*end != '\0' || !(b > 0.0 && b <= 8.0))
        return Status::Error("format " + item + ": tqcB needs B, the bits per coordinate, in (0, 8]");
    } else {
      auto c = make_codec(item, 128);
      if (!c) return c.status();
    }
    out.push_back(item);
    pos = comma + 1;
  }
  return out;
}

}  // namespace tkv
