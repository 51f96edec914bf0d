// A KV policy: what each layer's K and V rows are stored as, written by
// `turbokv calibrate` and read by every tool that builds a cache
// (--kv-policy). Per (layer, K or V): a format (calibrated tqc or any plain
// one) and, per KV head, the calibration (mean, basis, variances). The file
// is versioned, checksummed and bound to one model's fingerprint.
//
// File layout (little-endian):
//   "TKVPOLCY" (8 bytes), u32 version = 2, u64 model fingerprint,
//   u32 n_layer, n_kv_heads, head_dim, f64 budget (bits per value, 0 = none),
//   u32 source length + bytes (a description of the calibration run),
//   (version 2) u32 protected sinks, u32 protected recent tokens, u32 length
//   + bytes of the protected format (version 1: none),
//   then for each layer, K then V: u32 format length + bytes,
//     for each head: f32 mean[d], f32 var[d], f32 basis[d*d];
//   u64 FNV-1a of every byte before it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "codec/calibrated.h"
#include "util/status.h"

namespace tkv {

struct KvPolicyEntry {
  std::string format;            // "tqc3.5", "tq4", "q8_0", ...
  std::vector<HeadBasis> heads;  // n_kv_heads calibrations (the mean is used for every format)
};

struct KvPolicy {
  uint64_t model = 0;  // Model::fingerprint() of the model it was calibrated on
  int n_layer = 0, n_kv_heads = 0, head_dim = 0;
  double budget = 0;
  std::string source;
  // Protected tokens the policy was chosen with (calibrate --protect): the
  // cache keeps them unless --kv-protect says otherwise. 0, 0: none.
  int protect_sinks = 0, protect_recent = 0;
  std::string protect_type = "q8_0";
  std::vector<KvPolicyEntry> k, v;  // [n_layer]

  // Average stored bits per value over all layers, K and V (row bytes * 8 / d).
  Expected<double> bits_per_value() const;
  // xxHash64 of everything that decides how rows are coded (model, shape,
  // formats, means, variances, bases; not the description): binds cache files
  // to the policy that made them.
  uint64_t fingerprint() const;
};

Status write_kv_policy(const std::string& path, const KvPolicy& p);
// Checks magic, version, sizes and checksum; with model != 0, refuses a policy
// calibrated on another model.
Expected<KvPolicy> read_kv_policy(const std::string& path, uint64_t model = 0);
// The same from the file's bytes (fuzzing, tests); errors without the path.
Expected<KvPolicy> parse_kv_policy(const std::string& bytes, uint64_t model = 0);

}  // namespace tkv
