#include "util/llama_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/fp16.h"

namespace tkv {

void llama_quantize_q8_0(const float* x, int nblocks, uint8_t* out) {
  for (int b = 0; b < nblocks; ++b, x += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float dl = amax / 127.0f;
    const float id = recip_or_zero(dl);
    const uint16_t h = f32_to_f16(dl);
    std::memcpy(out, &h, 2);
    for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void llama_quantize_q4_0(const float* x, int nblocks, uint8_t* out) {
  for (int b = 0; b < nblocks; ++b, x += 32, out += 18) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
    const float dl = max / -8.0f;
    const float id = recip_or_zero(dl);
    const uint16_t h = f32_to_f16(dl);
    std::memcpy(out, &h, 2);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace tkv
