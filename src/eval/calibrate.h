// `turbokv calibrate`: builds a KV policy for one model from calibration text.
//  1. Runs the model (f32 cache) over chunks of the text and collects the K
//     and V rows each layer stores (K after RoPE), per KV head.
//  2. Fits per (layer, K or V, head) the mean and basis (calibrated coding),
//     and an isotropic alternative (the same mean, a seeded random rotation,
//     equal variances: plain rotated coding); per (layer, K or V) and bit
//     width the one with the lower error on held-out rows (the last quarter)
//     is kept.
//  3. With a budget: measures each (layer, K or V)'s sensitivity, the mean KLD
//     of the next-token distribution against the f32 cache when only it is
//     coded, at each candidate width, and picks the widths whose average meets
//     the budget with the least total KLD (exact dynamic programming).
//  4. With protected tokens in the budget: their rows, averaged over the
//     budget's context, come off the widths' share and the sensitivities are
//     measured with them in place; --protect auto tries a few protections
//     and keeps the one whose policy has the least measured KLD.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/kv_policy.h"
#include "model/model.h"
#include "util/status.h"

namespace tkv {

struct CalibrateOptions {
  int tokens = 8192;      // calibration tokens (whole chunks of n_ctx)
  int n_ctx = 512;        // chunk length; BOS first, like perplexity
  double budget = 0;      // average stored bits per value (scales included); 0: `bits` everywhere
  double bits = 4.25;     // stored bits per value when there is no budget
  int kld_tokens = 2048;  // tokens of the sensitivity runs (the first chunks)
  int threads = 2;
  uint64_t seed = kDefaultSeed;
  // With a budget: te8 (the E8 lattice code on the seeded rotation, 2 bits
  // per coordinate and its scale) is a candidate beside the tqc widths.
  bool lattice = false;
  // With a budget: ttcB (the trellis on the calibrated coordinates) beside
  // each tqcB of at most 3 coded bits.
  bool trellis = false;
  // Protected tokens (the cache's protect_* options): with a budget, their
  // rows averaged over budget_ctx tokens (0: n_ctx) count against it. With
  // protect_auto each of kProtectCandidates is tried instead.
  int protect_sinks = 0, protect_recent = 0;
  std::string protect_type = "q8_0";
  bool protect_auto = false;
  int budget_ctx = 0;
};

struct ProtectChoice {
  int sinks = 0, recent = 0;
  std::string type = "q8_0";
  double bits = 0;           // its rows' bits per value at the budget's context
  bool fits = true;          // the budget leaves the narrowest width beside it
  double predicted_kld = 0;  // sum of the sensitivities at the chosen widths
  double measured_kld = -1;  // of the whole policy (auto only; -1: not measured)
};
// What --protect auto tries: none, then each query's last 32 and 64 tokens
// at q8_0 (32 is one ring block: 16 would cost the same memory).
inline const ProtectChoice kProtectCandidates[] = {{0, 0, "q8_0"}, {0, 32, "q8_0"}, {0, 64, "q8_0"}};

struct CalibrateReport {
  struct Entry {
    int layer = 0;
    bool is_v = false;
    double bits = 0;         // stored bits per value
    std::string format;      // the chosen format (tqcB, ttcB or te8)
    bool calibrated = false; // calibrated basis (else isotropic; te8: its rotation)
    double mse_calibrated = 0, mse_isotropic = 0;  // held-out relative MSE at the chosen width
    std::vector<double> kld; // sensitivity per candidate width (budget runs)
  };
  std::vector<double> widths;  // candidate stored bits per value
  std::vector<std::string> formats;  // candidate formats, one per width
  std::vector<Entry> entries;  // layer-major, K then V
  double total_kld = 0;        // predicted (sum of sensitivities) at the chosen widths
  std::vector<ProtectChoice> protect_trials;  // budget runs: each protection tried
  int protect_chosen = 0;                     // its index
};

// progress gets one line per step; returning false stops the run (an error).
// Stored bits per value of a calibrated row at coded width b: b + 16 / d.
Expected<KvPolicy> calibrate(const Model& model, const std::string& text, const CalibrateOptions& o,
                             CalibrateReport* report = nullptr,
                             const std::function<bool(const std::string&)>& progress = {});

}  // namespace tkv
