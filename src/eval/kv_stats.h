// kv-stats: how much each KV format loses on a set of head vectors (one group
// per KV head): bits per value, relative MSE, cosine, inner-product error and
// attention-output error against random queries, and the distance to the
// rate-distortion bound. Each format is measured plain and with exact mean
// centring (DESIGN.md 1.4). Everything is computed in double.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/rotation.h"
#include "eval/kv_file.h"
#include "util/status.h"

namespace tkv {

struct KvStatsOptions {
  std::vector<std::string> formats;  // empty: all_format_names()
  uint64_t seed = kDefaultSeed;      // rotation seed; the random queries derive from it
  int queries = 64;                  // random queries per head
  int mean_rows = 64;                // rows that estimate the centring mean (all if fewer)
  bool plain = true;                 // measure without centring
  bool centered = true;              // measure with exact mean centring
  // Calibrated mode: each head's first half of the rows fits the tqc basis
  // and the centring mean; every format is measured on the second half.
  bool calibrated = false;
};

struct KvStatsRow {
  std::string source;  // file name or "synthetic"
  std::string format;
  int d = 0;
  uint32_t heads = 0, tokens = 0;
  bool mean_centered = false;
  double bits_per_value = 0;
  double size_vs_f16 = 0;  // 16 / bits_per_value
  double rel_mse = 0;      // sum ||x - x̂||² / sum ||x||² over all vectors
  double cosine = 0;       // mean over vectors of cos(x, x̂)
  double ip_rel_err = 0;   // sqrt(sum (q·k - q·k̂)² / sum (q·k)²) over queries and vectors
  double attn_rel_err = 0; // sqrt(sum ||o - ô||² / sum ||o||²) over queries
  double rd_ratio = 0;     // rel_mse / 4^-bits_per_value
};

// Measures every format in opt.formats on every head of kv (rows = tokens).
// tqc formats need opt.calibrated (they always code x - mu of the fit).
// Errors (bad format, unsupported d, NaN/Inf or out-of-range values) name the
// source, the head, the format and the row.
Expected<std::vector<KvStatsRow>> kv_stats(const KvFile& kv, const std::string& source,
                                           const KvStatsOptions& opt = {});

// Encodes and decodes every head with one format; same header, decoded data.
// With mean_center, each head is coded as x - μ and μ added back after decoding.
Expected<KvFile> kv_roundtrip(const KvFile& kv, const std::string& format, bool mean_center,
                              uint64_t seed = kDefaultSeed, int mean_rows = 64);

// A human table of the rows of one source: one line per format, the plain and
// the mean-centred figures side by side.
std::string kv_stats_table(const std::vector<KvStatsRow>& rows);
// A JSON array, one object per row.
nlohmann::json kv_stats_json(const std::vector<KvStatsRow>& rows);

}  // namespace tkv
