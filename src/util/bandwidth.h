// Memory bandwidth of this machine measured on huge-page buffers, for
// benchmarks that report how close a kernel gets to the memory floor.
#pragma once
#include <utility>

namespace tkv {

struct Bandwidth {
  double copy_gbs;  // memcpy traffic (bytes read + bytes written) per second
  double read_gbs;  // a summing read-only stream
};

Bandwidth measure_bandwidth(int threads);

}  // namespace tkv
