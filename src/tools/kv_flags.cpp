#include "tools/kv_flags.h"

#include <memory>

namespace tkv {

void add_kv_policy_flags(CLI::App* cmd, KvPolicyFlags& f) {
  auto* p = cmd->add_option("--kv-policy", f.policy, "per-layer KV formats from `turbokv calibrate` (replaces -ctk/-ctv)");
  auto* s = cmd->add_option("--kv-preset", f.preset, "per-layer plain KV formats: quality, balanced or compact")
                ->check(CLI::IsMember({"quality", "balanced", "compact"}));
  p->excludes(s);
}

Status apply_kv_policy_flags(const KvPolicyFlags& f, const Model& m, KvCacheOptions& co) {
  if (!f.policy.empty()) {
    auto p = read_kv_policy(f.policy, m.fingerprint());
    if (!p) return p.status();
    co.policy = std::make_shared<const KvPolicy>(std::move(*p));
    return Status::Ok();
  }
  if (!f.preset.empty()) return apply_kv_preset(f.preset, m.config().n_layer, co);
  return Status::Ok();
}

}  // namespace tkv
