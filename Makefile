# The two set-up commands: `make demo` and `make test` (see README.md).
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= 0
CMAKE_FLAGS ?=
PREFIX ?= /usr/local

.PHONY: all deps build demo install test test-fast test-asan test-fuzz fuzz bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/turbokv demo

# The C API (include/turbokv.h, libturbokv.so, turbokv.pc), the Python module
# (PREFIX/lib/python3.X/dist-packages) and the turbokv binary, under PREFIX.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Release suite, then the same suite under AddressSanitizer + UBSan, which
# also runs every fuzz harness on its seeds and a fixed set of mutants
# (FuzzReplay.*, fuzz/standalone/replay_main.cpp: the harnesses cannot rot).
# Coverage-guided fuzzing with clang's libFuzzer is `make fuzz` (a third
# build of every library: it left `make test` at 18 min on 2 cores).
test: test-fast test-asan

test-fast: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS) --target turbokv tkv_tests
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The sanitizer pass runs every test but these, which run in the Release pass
# above: the ones that re-measure perplexity over thousands of tokens (across
# matmul cores, and against llama.cpp's and the float64 figures: 40 s in
# Release together, minutes under the sanitizers), the codebooks' Monte Carlo
# checks (arithmetic on vectors the tests make, 32 s under the sanitizers),
# and the demo (70 s under the sanitizers: the other CLI tests drive the same
# code), and the K-quant models against float64 (24 s under the sanitizers;
# the matmul tests run every K-quant kernel there), and calibrate with the
# lattice candidate (7 s under the sanitizers; the calibration test before it
# runs the same code there, te8's codec its own tests) and with protected
# tokens (27 s under the sanitizers: four calibrations; the policy file's
# protection fields are read there by FuzzReplay.policy, the protected step
# by Protected.*). Accuracy and end-to-end checks whose code paths the other tests
# cover under the sanitizers.
ASAN_ONLY_IN_RELEASE = Policy.CalibrationWithTheLatticeCandidateIsOptimalAndRuns|Policy.CalibrationCountsProtectedTokensAndRecordsThem|Matmul.ReferenceModelPerplexityWithinPointZeroFivePercent|Model.KQuantWeightsMatchReferenceOnDequantizedWeights|Matmul.RandomModelsOfEachArchitecturePerplexityWithinPointZeroFivePercent|ExternalReference.PerplexityOfEveryLlamaQuantizedFileWithinPointTwoPercentOfLlamaCpp|ExternalReference.ReferenceModelWikiTextPerplexityEqualsTheFloat64Figure|Codebook.D64AndD256MonteCarloAgreesWithIntegration|Codebook.D128MonteCarloOver200kUnitVectors|Cli.DemoRunsAndGivesVerdicts
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTKV_SANITIZE=ON -DTKV_BUILD_BENCH=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j$(JOBS) -E '^($(ASAN_ONLY_IN_RELEASE))$$'

# Every libFuzzer harness (fuzz/*.cpp) for FUZZ_SECONDS each (or FUZZ_RUNS
# inputs, if set, whichever comes first), from its seed corpus; fails on a
# crash, leak, sanitizer report, timeout or out-of-memory. -O1 (ASan's and
# libFuzzer's recommendation): the build now holds the model and eval layers.
fuzz:
	@scripts/install-deps.sh fuzz
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -DNDEBUG' -DTKV_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS)
	@scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_RUNS)

# libFuzzer for 5 s a harness (what `make test` ran before FuzzReplay).
test-fuzz:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=5

bench: build
	./$(BUILD)/tkv_bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
