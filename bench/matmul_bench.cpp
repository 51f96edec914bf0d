// Matrix-multiply cores (matmul/matmul.h): one 2048 x 2048 weight matrix of
// each type against 1 token (decode) and 512 tokens (prefill), each core, one
// thread. Counter "flops" = 2 rows cols tokens per second; compare it with
// the FMA peak of the same run (`turbokv bench-attn` prints it) and the cores
// with each other, never with figures from another run.
//
//   build/tkv_bench --benchmark_filter='matmul/Q8_0/512'
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "matmul/matmul.h"
#include "gguf/quantize_weights.h"
#include "gguf/weight_blocks.h"
#include "util/fma_peak.h"
#include "util/fp16.h"
#include "util/rng.h"
#include "util/simd_targets.h"

namespace tkv {
namespace {

struct Weights {
  std::vector<uint8_t> bytes;
  Matrix m;
};

Weights make_weights(const std::string& type, uint32_t id, int64_t rows, int64_t cols) {
  Rng rng(5);
  Weights w;
  w.m.type = id;
  w.m.rows = rows;
  w.m.cols = cols;
  w.m.row_bytes = static_cast<size_t>(cols / weight_block_values(id) * weight_block_bytes(id));
  w.bytes.resize(w.m.row_bytes * rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = static_cast<float>(0.02 * rng.gaussian());
    uint8_t* out = &w.bytes[r * w.m.row_bytes];
    if (id == 1 || id == 30) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t h = id == 1 ? f32_to_f16(row[c]) : f32_to_bf16(row[c]);
        std::memcpy(out + 2 * c, &h, 2);
      }
    } else {
      quantize_weight_row(type, row.data(), cols, out);
    }
  }
  w.m.data = w.bytes.data();
  return w;
}

// target: a SIMD target to force (0: the best), so an AVX-512 machine also
// measures the AVX2 kernels that AVX2-only CPUs run.
void BM_matmul(benchmark::State& state, std::string type, uint32_t id, MatmulCore core, int64_t target) {
  const int n_tok = static_cast<int>(state.range(0));
  const int64_t rows = 2048, cols = 2048;
  static std::string cached_type;
  static Weights w;
  if (cached_type != type) {
    w = make_weights(type, id, rows, cols);
    cached_type = type;
  }
  Rng rng(9);
  std::vector<float> x(static_cast<size_t>(n_tok * cols)), y(static_cast<size_t>(n_tok * rows));
  for (auto& v : x) v = static_cast<float>(rng.gaussian());
  simd_force_target(target);
  for (auto _ : state) {
    matmul_with(core, w.m, x.data(), n_tok, y.data(), 1);
    benchmark::DoNotOptimize(y.data());
  }
  simd_force_target(0);
  state.counters["flops"] =
      benchmark::Counter(2.0 * rows * cols * n_tok * state.iterations(), benchmark::Counter::kIsRate);
}

// The machine's FMA and int8 (VNNI) peaks on 1 and 2 threads, as the same
// "flops" counter.
void BM_fma_peak(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = measure_fma_gflops(static_cast<int>(state.range(0)));
  state.counters["flops"] = g * 1e9;
}
BENCHMARK(BM_fma_peak)->Name("matmul/fma_peak")->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);
void BM_vnni_peak(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = measure_vnni_gops(static_cast<int>(state.range(0)));
  state.counters["flops"] = g * 1e9;
}
BENCHMARK(BM_vnni_peak)->Name("matmul/int8_peak")->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

int register_all() {
  const std::pair<const char*, uint32_t> types[] = {{"F16", 1}, {"BF16", 30}, {"Q8_0", 8}, {"Q4_0", 2}, {"Q4_K", 12}, {"Q6_K", 14}};
  for (const auto& [name, id] : types)
    for (MatmulCore core : {MatmulCore::kRows, MatmulCore::kTiled, MatmulCore::kInt8})
      benchmark::RegisterBenchmark((std::string("matmul/") + name + "/" + matmul_core_name(core)).c_str(), BM_matmul,
                                   std::string(name), id, core, int64_t{0})
          ->Arg(1)
          ->Arg(8)
          ->Arg(32)
          ->Arg(64)
          ->Arg(128)
          ->Arg(512)
          ->Unit(benchmark::kMillisecond);
  // The AVX2 kernels (f32 tiles and the vpmaddubsw int8 core), where this CPU has AVX2.
  int64_t avx2 = 0;
  for (const auto& t : simd_targets())
    if (t.name == "AVX2") avx2 = t.bit;
  if (avx2 != 0)
    for (const auto& [name, id] : types)
      for (MatmulCore core : {MatmulCore::kTiled, MatmulCore::kInt8})
        benchmark::RegisterBenchmark((std::string("matmul/") + name + "/avx2_" + matmul_core_name(core)).c_str(),
                                     BM_matmul, std::string(name), id, core, avx2)
            ->Arg(512)
            ->Unit(benchmark::kMillisecond);
  return 0;
}
const int registered = register_all();

}  // namespace
}  // namespace tkv
