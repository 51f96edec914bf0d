#include "util/simd_targets.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

namespace {
bool amx_granted() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool bf16 = (d >> 22) & 1, tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
  if (!(bf16 && tile && int8)) return false;
  // Linux 5.16+: the tile data state (XFEATURE 18) is off until the process
  // asks; the call fails where the kernel or the hypervisor does not offer it.
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
}  // namespace

bool amx_usable() {
  static const bool granted = [] {
    const char* e = std::getenv("TKV_AMX");
    if (e != nullptr && std::strcmp(e, "0") == 0) return false;
    return amx_granted();
  }();
  return granted && (simd_supported_targets() & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
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
