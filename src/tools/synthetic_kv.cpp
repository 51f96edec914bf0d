#include "tools/synthetic_kv.h"

#include <cmath>
#include <vector>

#include "util/rng.h"

namespace tkv {

KvFile synthetic_kv(const SyntheticKvOptions& opt) {
  KvFile kv;
  kv.kv_heads = static_cast<uint32_t>(opt.heads);
  kv.tokens = static_cast<uint32_t>(opt.tokens);
  kv.head_dim = static_cast<uint32_t>(opt.d);
  kv.data.resize(kv.values());
  Rng rng(opt.seed);
  const double log_lo = std::log(opt.rms_lo), log_hi = std::log(opt.rms_hi);
  std::vector<double> scale(opt.d), mean(opt.d);
  for (int h = 0; h < opt.heads; ++h) {
    for (int c = 0; c < opt.d; ++c) {
      scale[c] = std::exp(log_lo + (log_hi - log_lo) * rng.uniform());
      const bool offset = rng.uniform() < opt.mean_fraction;
      const double sign = rng.uniform() < 0.5 ? -1.0 : 1.0;
      mean[c] = offset ? sign * opt.mean_scale * scale[c] : 0.0;
    }
    float* x = kv.head(static_cast<uint32_t>(h));
    for (int t = 0; t < opt.tokens; ++t)
      for (int c = 0; c < opt.d; ++c)
        x[size_t{static_cast<size_t>(t)} * opt.d + c] = static_cast<float>(mean[c] + scale[c] * rng.gaussian());
  }
  return kv;
}

}  // namespace tkv
