// Measured peak float multiply-add throughput of this machine (the dispatched
// SIMD target, independent accumulators, no memory traffic), used by
// benchmarks to state the compute floor of a kernel next to its memory floor.
#pragma once

namespace tkv {

// GFLOP/s (an FMA counts 2) over `threads` threads, best of a few short runs.
double measure_fma_gflops(int threads);
// The same for int8 dot products (AVX512-VNNI vpdpbusd, 2 operations per byte
// product); 0 where the CPU has no VNNI.
double measure_vnni_gops(int threads);

}  // namespace tkv
