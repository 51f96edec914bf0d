// Which SIMD targets (Highway) are compiled in and supported here, and a switch
// that forces dispatch to one of them (tests run every kernel on each target).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tkv {

struct SimdTarget {
  int64_t bit;
  std::string name;
};

// Compiled-in targets that this CPU supports, best first (e.g. AVX3, AVX2, EMU128).
std::vector<SimdTarget> simd_targets();
// The target that dynamic dispatch picks now.
std::string simd_current_target();
// Restrict dispatch to one target (0 = undo and use the best one).
void simd_force_target(int64_t bit);

}  // namespace tkv
