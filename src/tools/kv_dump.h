// `turbokv kv-dump`: the real K and V vectors of a run (K after RoPE, exactly
// what the cache stores), written per layer in the KV file format of
// ../shared/data/kv so that kv-stats can study any model's cache.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "util/status.h"

namespace tkv {

// Runs the first `max_tokens` tokens of `text` (BOS first) and writes
// DIR/layerN_keys.bin and DIR/layerN_values.bin for each layer in `layers`,
// in forward passes of 512 tokens; progress(done, total) after each.
Status kv_dump(const Model& model, const std::string& text, const std::vector<int>& layers, int max_tokens,
               const std::string& dir, int threads, const std::function<void(int, int)>& progress = {});

}  // namespace tkv
