#include "tools/synthetic_kv.h"

#include <algorithm>
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
  std::vector<double> sd(opt.d), mean(opt.d);
  for (int h = 0; h < opt.heads; ++h) {
    for (int c = 0; c < opt.d; ++c) {
      const double rms =
          std::clamp(opt.rms_median * std::exp(opt.rms_log_sigma * rng.gaussian()), opt.rms_lo, opt.rms_hi);
      const double share = opt.max_mean_share * rng.uniform();  // of rms², held by the mean
      const double sign = rng.uniform() < 0.5 ? -1.0 : 1.0;
      mean[c] = sign * rms * std::sqrt(share);
      sd[c] = rms * std::sqrt(1.0 - share);
    }
    float* x = kv.head(static_cast<uint32_t>(h));
    for (size_t t = 0; t < kv.tokens; ++t)
      for (int c = 0; c < opt.d; ++c) x[t * opt.d + c] = static_cast<float>(mean[c] + sd[c] * rng.gaussian());
  }
  return kv;
}

}  // namespace tkv
