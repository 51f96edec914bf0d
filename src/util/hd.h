// TKV_HD marks functions that are compiled for the host and, under nvcc, for
// CUDA devices too: the codec's bit-exact helpers (fp16.h) and the flattened
// row programs (codec/flat_kernels.h) are one source for the CPU and the GPU,
// so the GPU writes the CPU's bytes by construction and the CPU tests the code
// the GPU runs.
#pragma once
#if defined(__CUDACC__)
#define TKV_HD __host__ __device__
#else
#define TKV_HD
#endif
