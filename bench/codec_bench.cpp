// Codec throughput: rows per second for Codec::quantize (rotate + quantize +
// pack) and Codec::dequantize (unpack + decode + inverse rotation) of every
// format in all_format_names(), at d = 64, 128, 256, single thread.
//
// Each iteration handles a batch of kRows random Gaussian rows, so per-call
// overhead is amortised. items_per_second counts rows; ns_per_row is its inverse.
// The baseline "memcpy_f32" copies the same f32 rows (kRows * d * 4 bytes) in the
// same run: report ratios against it, never absolute numbers from another run.
//
//   build/tkv_bench --benchmark_filter='tq4/d:128'
//   build/tkv_bench --benchmark_min_time=0.2 --benchmark_format=json > out.json
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/format.h"
#include "util/rng.h"

namespace tkv {
namespace {

constexpr int kRows = 256;  // rows per iteration (one batch)
constexpr int kDims[] = {64, 128, 256};

std::vector<float> gaussian_rows(int n, int d, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (auto& v : x) v = static_cast<float>(rng.gaussian());
  return x;
}

void set_row_counters(benchmark::State& state, int d, size_t row_bytes) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kRows);
  // Seconds per row (displayed with an SI prefix, e.g. "120n" = 120 ns).
  state.counters["ns_per_row"] = benchmark::Counter(
      kRows, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["row_bytes"] = static_cast<double>(row_bytes);
  state.counters["d"] = d;
}

void BM_memcpy_f32(benchmark::State& state, int d) {
  const auto x = gaussian_rows(kRows, d, 42);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), sizeof(float) * x.size());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_row_counters(state, d, sizeof(float) * d);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kRows * d * 4);
}

void BM_quantize(benchmark::State& state, std::string name, int d) {
  auto c = make_codec(name, d);
  if (!c) { state.SkipWithError(c.error().c_str()); return; }
  const Codec& codec = **c;
  const auto x = gaussian_rows(kRows, d, 42);
  std::vector<uint8_t> out(codec.row_bytes() * kRows);
  for (auto _ : state) {
    Status s = codec.quantize(x.data(), kRows, out.data());
    if (!s.ok()) { state.SkipWithError(s.message().c_str()); break; }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_row_counters(state, d, codec.row_bytes());
}

void BM_dequantize(benchmark::State& state, std::string name, int d) {
  auto c = make_codec(name, d);
  if (!c) { state.SkipWithError(c.error().c_str()); return; }
  const Codec& codec = **c;
  const auto x = gaussian_rows(kRows, d, 42);
  std::vector<uint8_t> q(codec.row_bytes() * kRows);
  if (Status s = codec.quantize(x.data(), kRows, q.data()); !s.ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  std::vector<float> y(x.size());
  for (auto _ : state) {
    codec.dequantize(q.data(), kRows, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_row_counters(state, d, codec.row_bytes());
}

// One row per call, as when a decoder appends one token per (layer, KV head):
// the same kRows rows, but kRows calls. The difference to BM_quantize is the
// per-call overhead (validation, dispatch, padding the row buffer).
void BM_quantize_1row(benchmark::State& state, std::string name, int d) {
  auto c = make_codec(name, d);
  if (!c) { state.SkipWithError(c.error().c_str()); return; }
  const Codec& codec = **c;
  const auto x = gaussian_rows(kRows, d, 42);
  std::vector<uint8_t> out(codec.row_bytes() * kRows);
  for (auto _ : state) {
    Status s;
    for (int r = 0; r < kRows && s.ok(); ++r)
      s = codec.quantize(x.data() + static_cast<size_t>(r) * d, 1, out.data() + r * codec.row_bytes());
    if (!s.ok()) { state.SkipWithError(s.message().c_str()); break; }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_row_counters(state, d, codec.row_bytes());
}

// 1M rows in one call, streamed from memory (512 MiB of f32 at d = 128): the
// C++ side of bench/python_quantize.py, which times turbokv.Codec.quantize
// on the same number of rows in the same run.
void BM_quantize_bulk(benchmark::State& state, std::string name, int d) {
  constexpr size_t kBulkRows = size_t{1} << 20;
  auto c = make_codec(name, d);
  if (!c) { state.SkipWithError(c.error().c_str()); return; }
  const Codec& codec = **c;
  const auto x = gaussian_rows(static_cast<int>(kBulkRows), d, 42);
  std::vector<uint8_t> out(codec.row_bytes() * kBulkRows);
  for (auto _ : state) {
    Status s = codec.quantize(x.data(), kBulkRows, out.data());
    if (!s.ok()) { state.SkipWithError(s.message().c_str()); break; }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kBulkRows));
}

// Registered at static-initialisation time (benchmark_main provides main()).
// Order: per d, the baseline first, then quantize and dequantize per format;
// last, single-row quantize calls for a few formats at d = 128.
const bool kRegistered = [] {
  for (int d : kDims) {
    const std::string ds = "/d:" + std::to_string(d);
    benchmark::RegisterBenchmark(("memcpy_f32" + ds).c_str(), BM_memcpy_f32, d);
    for (const auto& name : all_format_names()) {
      benchmark::RegisterBenchmark(("quantize/" + name + ds).c_str(), BM_quantize, name, d);
      benchmark::RegisterBenchmark(("dequantize/" + name + ds).c_str(), BM_dequantize, name, d);
    }
  }
  for (const char* name : {"f16", "q8_0", "q8_0r", "tq3", "tq4", "tq4.5"})
    benchmark::RegisterBenchmark((std::string("quantize_1row/") + name + "/d:128").c_str(),
                                 BM_quantize_1row, std::string(name), 128);
  for (const char* name : {"tq4", "q8_0"})
    benchmark::RegisterBenchmark((std::string("quantize_bulk/") + name + "/d:128").c_str(), BM_quantize_bulk,
                                 std::string(name), 128)
        ->Unit(benchmark::kMillisecond)
        ->MinTime(1.0);
  return true;
}();

}  // namespace
}  // namespace tkv
