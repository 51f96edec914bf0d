// Built-in synthetic head vectors that look like real keys: Gaussian with
// per-channel scales spanning 30x (outlier channels) and a per-channel mean
// offset on some channels (the bias that mean-centring removes). Seeded and
// identical on every platform, so tests and the demo can assert on them.
#pragma once
#include <cstdint>

#include "tools/kv_file.h"

namespace tkv {

struct SyntheticKvOptions {
  int d = 128;
  int tokens = 2048;
  int heads = 2;
  uint64_t seed = 1;
  // Channel RMS (about the mean) is log-uniform in [rms_lo, rms_hi].
  double rms_lo = 0.2, rms_hi = 6.0;
  // Each channel has a mean offset of +-mean_scale x its RMS with this probability;
  // 0.25 and 2 put about half the energy in the mean, as on real Qwen keys.
  double mean_fraction = 0.25, mean_scale = 2.0;
};

// One KvFile (layer 0) of heads x tokens x d floats; each head has its own channel
// scales and offsets. Callers validate sizes (d >= 1, tokens >= 1, heads >= 1).
KvFile synthetic_kv(const SyntheticKvOptions& opt);

}  // namespace tkv
