#include "util/simd_targets.h"

#include <atomic>

#include <hwy/highway.h>
#include <hwy/targets.h>

namespace tkv {

namespace {
std::atomic<int64_t> g_supported{0};  // 0: not known (Highway always reports at least one target)
}  // namespace

int64_t simd_supported_targets() {
  int64_t t = g_supported.load(std::memory_order_relaxed);
  if (t == 0) {
    t = hwy::SupportedTargets();
    g_supported.store(t, std::memory_order_relaxed);
  }
  return t;
}

std::vector<SimdTarget> simd_targets() {
  std::vector<SimdTarget> out;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back({t, hwy::TargetName(t)});
  return out;
}

std::string simd_current_target() {
  // Dispatch picks the best (lowest bit) target that is both supported by
  // the CPU and compiled into this build.
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & (~targets + 1));
}

void simd_force_target(int64_t bit) {
  if (bit == 0) {
    hwy::SetSupportedTargetsForTest(0);
  } else {
    hwy::SetSupportedTargetsForTest(bit);
  }
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  g_supported.store(hwy::SupportedTargets(), std::memory_order_relaxed);
}

}  // namespace tkv
