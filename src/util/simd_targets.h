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
// hwy::SupportedTargets(), remembered until the next simd_force_target:
// Highway 1.0.3 runs CPUID on every call, and CPUID traps to the hypervisor
// in a VM (perf: 3.5 % of a one-thread Q4_K decode, ~20 us a call, from the
// kernels' availability checks once per matrix product).
int64_t simd_supported_targets();
// Intel AMX (tile registers with AMX-BF16 and AMX-INT8) usable now: the CPU
// has them, Linux granted this process the tile state (arch_prctl
// ARCH_REQ_XCOMP_PERM, asked once), dispatch may pick an AVX-512 target (the
// AMX kernels prepare their operands with AVX-512; forcing AVX2 turns them
// off, so tests reach the kernels below them), and TKV_AMX is not 0.
bool amx_usable();

}  // namespace tkv
