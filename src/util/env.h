// Switches read from the environment: diagnostic comparisons that turn a
// default-on path off (TKV_INT8_LANES=0, TKV_V_DROP_ZERO=0).
#pragma once
#include <cstdlib>
#include <cstring>

namespace tkv {

// False when the environment sets `name` to exactly "0", else true.
inline bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::strcmp(e, "0") == 0);
}

}  // namespace tkv
