// Test helpers for SIMD dispatch and the head dims every codec test covers.
#pragma once
#include "util/simd_targets.h"

namespace tkv {

// Undoes simd_force_target when a test that forces targets ends (or fails).
struct TargetGuard {
  ~TargetGuard() { simd_force_target(0); }
};

// The head dims the codec tests run: powers of two and the odd multiples of
// 16 models use (80, 96, 112, 160, 192, 320, 576).
inline constexpr int kDims[] = {64, 80, 96, 112, 128, 160, 192, 256, 320, 512, 576};

}  // namespace tkv
