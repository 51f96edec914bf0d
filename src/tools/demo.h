// `turbokv demo`: what turbokv does, shown on data: the kv-stats table on built-in
// synthetic keys and, when shared/ is present, on real Qwen3.5-0.8B keys and
// values, then a one-line verdict per format. Runs in a few seconds.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "eval/kv_stats.h"
#include "util/status.h"

namespace tkv {

// The formats the demo compares: references, llama.cpp's baselines, tq.
const std::vector<std::string>& demo_formats();

// One line per format of `rows` (one source), judged on the plain rows: bits,
// size vs f16, rel MSE and its factor over the rate-distortion bound, attention
// error, and which baseline it beats at no more bits (or what beats it).
std::vector<std::string> demo_verdicts(const std::vector<KvStatsRow>& rows);

// Writes the whole demo to out; fails only on a codec error.
Status run_demo(std::ostream& out);

}  // namespace tkv
