// The AMX tile instructions the matmul kernels use (matmul_amx.cpp), as
// assembly with a memory clobber: GCC's _tile_*
// macros tell the compiler nothing of the memory they read and write, so a
// store into a buffer that a tile then loads could be moved past the load.
// Internal to matmul/; callers check amx_usable() (util/simd_targets.h).
#pragma once
#include <cstdint>

#if defined(__x86_64__) && defined(__linux__) && !defined(TKV_NO_VNNI)
#define TKV_X86_AMX 1
#define TKV_TILE_LOAD(t, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define TKV_TILE_STORE(t, base, stride) \
  asm volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) : "memory")
#define TKV_TILE_ZERO(t) asm volatile("tilezero %%tmm" #t ::: "memory")
// c += a b: bf16 pairs into f32.
#define TKV_TILE_BF16(c, a, b) asm volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::: "memory")

namespace tkv {

// ldtilecfg's 64-byte operand (palette 1): rows and bytes per row of tiles 0-7.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tile shapes live in each thread's state: every thread that runs tile
// instructions loads a configuration first and releases it when done.
inline void tiles_load_config(const TileConfig& cfg) { asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory"); }
inline void tiles_release() { asm volatile("tilerelease" ::: "memory"); }

}  // namespace tkv
#endif
