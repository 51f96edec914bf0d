#include "tools/kv_flags.h"

#include <memory>

#include "tools/arg_lists.h"

namespace tkv {

void add_kv_policy_flags(CLI::App* cmd, KvPolicyFlags& f) {
  auto* p = cmd->add_option("--kv-policy", f.policy, "per-layer KV formats from `turbokv calibrate` (replaces -ctk/-ctv)");
  auto* s = cmd->add_option("--kv-preset", f.preset,
                            "per-layer plain KV formats: quality, balanced, compact, tiny (~2.5 bits, recent tokens "
                            "protected) or tiny-e8 (tiny on E8 lattice rows: less error, 0.73x the decode speed)")
                ->check(CLI::IsMember({"quality", "balanced", "compact", "tiny", "tiny-e8"}));
  p->excludes(s);
  cmd->add_option("--kv-protect", f.protect,
                  "protected tokens SINKS,RECENT[,FORMAT]: the first SINKS tokens and each query's last RECENT "
                  "tokens read at FORMAT's width (default q8_0) besides the base rows, e.g. 4,64 or 4,64,f16");
}

Status apply_kv_policy_flags(const KvPolicyFlags& f, const Model& m, KvCacheOptions& co) {
  Status st = apply_kv_policy_or_preset(f.policy, f.preset, m.config().kv_shape().n_layer,
                                        f.policy.empty() ? 0 : m.fingerprint(), co);
  if (!st.ok() || f.protect.empty()) return st;
  // After the preset or policy: an explicit flag wins.
  if (!parse_protect_spec(f.protect, co.protect_sinks, co.protect_recent, co.protect_type))
    return Status::Error("--kv-protect '" + f.protect + "': expected SINKS,RECENT[,FORMAT] (two counts, e.g. 4,64,q8_0)");
  return Status::Ok();
}

bool parse_protect_spec(const std::string& spec, int& sinks, int& recent, std::string& type) {
  const std::vector<std::string> parts = split_list(spec);
  auto count = [](const std::string& s, int& out) {
    if (s.empty() || s.size() > 8 || s.find_first_not_of("0123456789") != std::string::npos) return false;
    out = std::stoi(s);
    return true;
  };
  if (parts.size() < 2 || parts.size() > 3 || spec.back() == ',' || !count(parts[0], sinks) || !count(parts[1], recent))
    return false;
  if (parts.size() == 3) type = parts[2];
  return true;
}

void add_cache_flags(CLI::App* cmd, CacheFlags& f) {
  cmd->add_option("--cache-type-k", f.ctk, "K cache format (-ctk)");
  cmd->add_option("--cache-type-v", f.ctv, "V cache format (-ctv)");
  cmd->add_option("--kv-mean-center", f.mean_center, "exact mean centring for tq caches")
      ->check(CLI::IsMember({"on", "off"}));
  add_kv_policy_flags(cmd, f.kv);
}

Status apply_cache_flags(const CacheFlags& f, const Model& m, KvCacheOptions& co) {
  co.type_k = f.ctk;
  co.type_v = f.ctv;
  co.mean_center = f.mean_center == "on";
  return apply_kv_policy_flags(f.kv, m, co);
}

Expected<std::pair<double, double>> cache_bits_per_value(const KvCacheOptions& co, const Model& m) {
  KvCacheOptions one = co;  // at the real context: protected tokens' rows are averaged over it
  const ModelConfig& c = m.config();
  auto probe = KvCache::create(c.kv_shape(), one);
  if (!probe) return probe.status();
  return std::make_pair((*probe)->k_bits_per_value(), (*probe)->v_bits_per_value());
}

}  // namespace tkv
