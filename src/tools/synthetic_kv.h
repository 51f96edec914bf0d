// Built-in synthetic head vectors that look like real keys: Gaussian, with
// per-channel scales spanning 30x (outlier channels) and per-channel mean
// offsets (the bias that mean-centring removes). Seeded and identical on every
// platform, so tests and the demo can assert on them.
//
// The defaults mimic the real Qwen3.5-0.8B keys in shared/data/kv: there, the
// channel RMS has percentiles 10/50/90/100% ~ 0.7/1.0/2.0/5-6 (min ~0.2) and the
// mean holds ~50% of the energy. A log-normal RMS (median 1, sigma 0.54, clipped
// to [0.2, 6]) matches those percentiles; each channel's share of energy in its
// mean is uniform in [0, max_mean_share]. (A log-uniform RMS over [0.2, 6] would
// put a quarter of the channels above 2.6 and make every softmax one-hot.)
#pragma once
#include <cstdint>

#include "eval/kv_file.h"

namespace tkv {

struct SyntheticKvOptions {
  int d = 128;
  int tokens = 2048;
  int heads = 2;
  uint64_t seed = 1;
  double rms_median = 1.0, rms_log_sigma = 0.54;  // channel RMS ~ log-normal...
  double rms_lo = 0.2, rms_hi = 6.0;              // ...clipped to this range
  double max_mean_share = 1.0;                    // 0: zero-mean channels
};

// One KvFile (layer 0) of heads x tokens x d floats; each head has its own channel
// scales and offsets. Callers validate sizes (d >= 1, tokens >= 1, heads >= 1).
KvFile synthetic_kv(const SyntheticKvOptions& opt);

}  // namespace tkv
