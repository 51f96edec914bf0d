// --kv-policy FILE and --kv-preset NAME, shared by run, perplexity, bench and
// niah: both replace -ctk/-ctv with per-layer formats.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

struct KvPolicyFlags {
  std::string policy;  // file from `turbokv calibrate`
  std::string preset;  // quality | balanced | compact
  bool any() const { return !policy.empty() || !preset.empty(); }
  // "policy FILE" / "preset NAME", for logs and JSON.
  std::string label() const { return !policy.empty() ? "policy " + policy : "preset " + preset; }
};

void add_kv_policy_flags(CLI::App* cmd, KvPolicyFlags& f);
// Fills co's per-layer formats (and calibration) for model m; a policy for
// another model, a bad file or an unknown preset is an error.
Status apply_kv_policy_flags(const KvPolicyFlags& f, const Model& m, KvCacheOptions& co);

}  // namespace tkv
