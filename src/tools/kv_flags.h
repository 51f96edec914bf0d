// Cache flags shared by the tools: --kv-policy FILE and --kv-preset NAME
// (run, perplexity, bench, niah; both replace -ctk/-ctv with per-layer
// formats), and with -ctk/-ctv/--kv-mean-center the whole set of one cache
// (run, perplexity, niah).
#pragma once
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "cache/kv_cache.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

struct KvPolicyFlags {
  std::string policy;  // file from `turbokv calibrate`
  std::string preset;  // quality | balanced | compact
  std::string protect; // --kv-protect SINKS,RECENT[,FORMAT]: protected tokens
  bool any() const { return !policy.empty() || !preset.empty(); }
  // "policy FILE" / "preset NAME", for logs and JSON.
  std::string label() const { return !policy.empty() ? "policy " + policy : "preset " + preset; }
};

void add_kv_policy_flags(CLI::App* cmd, KvPolicyFlags& f);
// Fills co's per-layer formats (and calibration) for model m; a policy for
// another model, a bad file or an unknown preset is an error.
Status apply_kv_policy_flags(const KvPolicyFlags& f, const Model& m, KvCacheOptions& co);

struct CacheFlags {
  explicit CacheFlags(std::string k, std::string v) : ctk(std::move(k)), ctv(std::move(v)) {}  // default formats
  std::string ctk, ctv, mean_center = "on";
  KvPolicyFlags kv;
  // What K / V are stored as, for logs and JSON: the formats, or the policy / preset.
  std::string k_label() const { return (kv.any() ? kv.label() : ctk) + protect_label(); }
  std::string v_label() const { return (kv.any() ? kv.label() : ctv) + protect_label(); }
  std::string protect_label() const { return kv.protect.empty() ? "" : " (protected " + kv.protect + ")"; }
};

// SINKS,RECENT[,FORMAT] (--kv-protect, calibrate --protect): false when
// malformed; FORMAT, when given, replaces type.
bool parse_protect_spec(const std::string& spec, int& sinks, int& recent, std::string& type);

// " (protected S,W,F)" for the protection a cache will have (from the flag,
// a preset or the policy), or "".
inline std::string protect_label(const KvCacheOptions& co) {
  if (co.protect_sinks + co.protect_recent == 0) return "";
  return " (protected " + std::to_string(co.protect_sinks) + "," + std::to_string(co.protect_recent) + "," +
         co.protect_type + ")";
}

// -ctk/-ctv (defaults: f's values), --kv-mean-center on|off, --kv-policy, --kv-preset.
void add_cache_flags(CLI::App* cmd, CacheFlags& f);
// co's formats, mean centring and per-layer formats for model m.
Status apply_cache_flags(const CacheFlags& f, const Model& m, KvCacheOptions& co);
// Bits per value of K and of V (averaged over layers) that co gives for m,
// read from a one-token cache.
Expected<std::pair<double, double>> cache_bits_per_value(const KvCacheOptions& co, const Model& m);

}  // namespace tkv
