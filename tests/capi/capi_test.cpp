// The C API (include/turbokv.h, libturbokv.so) against the C++ it wraps:
// codec bytes, attention, cache and generation bit for bit; errors as
// statuses with messages that name what was wrong; the library's exported
// symbols and soname; and the C example built against the installed files.
// This binary links both the static C++ libraries and libturbokv.so, whose
// own copy of them is private (only tkv_ symbols are exported), so each
// side below really runs its own code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "attention/attention.h"
#include "attn_case.h"
#include "cache/kv_cache.h"
#include "codec/calibrated.h"
#include "codec/format.h"
#include "codec/rotation.h"
#include "eval/calibrate.h"
#include "eval/perplexity.h"
#include "gguf/weight_blocks.h"
#include "model/model.h"
#include "model/sampler.h"
#include "test_models.h"
#include "shared_data.h"
#include "turbokv.h"
#include "util/rng.h"
#include "util/text_file.h"

namespace tkv {
namespace {

const std::string kModel = "models/ref-5m/ref-5m-f16.gguf";

// A fresh seed per run (printed on failure): the inputs are new each time.
uint64_t fresh_seed() {
  static const uint64_t s = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  return s;
}

std::vector<float> gaussian(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(scale * r.gaussian());
  return x;
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(CApi, CodecRoundTripGivesTheCppCodecsBytes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const char* formats[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q8_0r", "q4_0r", "tq2", "tq3.5", "tq4",
                           "tq4-ip", "tq2.5-nc", "tq8"};
  for (int d : {8, 72, 128, 200}) {
    for (const char* f : formats) {
      SCOPED_TRACE(std::string(f) + " d " + std::to_string(d));
      const size_t n = 37;
      const auto x = gaussian(n * d, seed + d, 2.0);
      tkv_codec* c = nullptr;
      ASSERT_EQ(tkv_codec_create(f, d, seed, &c), TKV_OK) << tkv_last_error();
      auto cpp = make_codec(f, d, seed);
      ASSERT_TRUE(cpp.ok()) << cpp.error();
      ASSERT_EQ(tkv_codec_row_bytes(c), (*cpp)->row_bytes());
      EXPECT_EQ(tkv_codec_head_dim(c), d);
      EXPECT_STREQ(tkv_codec_format(c), f);
      std::vector<uint8_t> a(n * (*cpp)->row_bytes()), b(a.size());
      ASSERT_EQ(tkv_codec_quantize(c, x.data(), n, a.data(), a.size()), TKV_OK) << tkv_last_error();
      ASSERT_TRUE((*cpp)->quantize(x.data(), n, b.data()).ok());
      EXPECT_EQ(a, b);
      std::vector<float> ya(n * d), yb(n * d);
      ASSERT_EQ(tkv_codec_dequantize(c, a.data(), n, ya.data(), ya.size()), TKV_OK) << tkv_last_error();
      (*cpp)->dequantize(b.data(), n, yb.data());
      EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)));
      tkv_codec_free(c);
    }
  }
}

TEST(CApi, CalibratedCodecIsTheFittedBasisCodec) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int d = 64;
  const size_t n = 300;
  auto x = gaussian(n * d, seed);
  for (size_t i = 0; i < n; ++i)  // anisotropic, off-centre rows
    for (int j = 0; j < d; ++j) x[i * d + j] = x[i * d + j] * (0.1f + j * 0.05f) + 0.3f * j;
  tkv_codec* c = nullptr;
  ASSERT_EQ(tkv_codec_calibrate("tqc3", d, x.data(), n, &c), TKV_OK) << tkv_last_error();
  auto basis = fit_head_basis(x.data(), n, d);
  ASSERT_TRUE(basis.ok());
  auto cpp = make_calibrated_codec("tqc3", *basis);
  ASSERT_TRUE(cpp.ok()) << cpp.error();
  std::vector<float> mean(d);
  ASSERT_EQ(tkv_codec_mean(c, mean.data(), mean.size()), TKV_OK);
  EXPECT_EQ(mean, basis->mean);
  std::vector<float> centred(x);
  for (size_t i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) centred[i * d + j] -= mean[j];
  std::vector<uint8_t> a(n * (*cpp)->row_bytes()), b(a.size());
  ASSERT_EQ(tkv_codec_quantize(c, centred.data(), n, a.data(), a.size()), TKV_OK) << tkv_last_error();
  ASSERT_TRUE((*cpp)->quantize(centred.data(), n, b.data()).ok());
  EXPECT_EQ(a, b);
  tkv_codec_free(c);
  // Plain formats are not made from rows, and tqc is not made without them.
  EXPECT_EQ(tkv_codec_calibrate("tq3", d, x.data(), n, &c), TKV_ERR_ARGUMENT);
  EXPECT_EQ(tkv_codec_create("tqc3", d, 1, &c), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("tkv_codec_calibrate"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_codec_calibrate("tqc3", d, x.data(), 1, &c), TKV_ERR_VALUE) << "one row cannot fit a basis";
}

TEST(CApi, ErrorsAreStatusesWithMessagesThatNameWhatWasWrong) {
  tkv_codec* c = nullptr;
  EXPECT_EQ(tkv_codec_create("tq9", 128, 1, &c), TKV_ERR_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(tkv_last_error()).find("tq9"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_codec_create(nullptr, 128, 1, &c), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("format is NULL"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_codec_create("tq4", 128, 1, nullptr), TKV_ERR_ARGUMENT);
  EXPECT_EQ(tkv_codec_create("tq4", 4, 1, &c), TKV_ERR_ARGUMENT) << "d 4 is below the rotated formats' 8";

  ASSERT_EQ(tkv_codec_create("tq4", 128, 1, &c), TKV_OK);
  auto x = gaussian(4 * 128, 5);
  std::vector<uint8_t> out(4 * tkv_codec_row_bytes(c));
  EXPECT_EQ(tkv_codec_quantize(c, x.data(), 4, out.data(), out.size() - 1), TKV_ERR_BUFFER);
  EXPECT_NE(std::string(tkv_last_error()).find(std::to_string(out.size() - 1)), std::string::npos) << tkv_last_error();
  x[3 * 128 + 7] = NAN;
  EXPECT_EQ(tkv_codec_quantize(c, x.data(), 4, out.data(), out.size()), TKV_ERR_VALUE);
  EXPECT_NE(std::string(tkv_last_error()).find("row 3 element 7"), std::string::npos) << tkv_last_error();
  std::vector<float> y(4 * 128);
  EXPECT_EQ(tkv_codec_dequantize(c, out.data(), 4, y.data(), y.size() - 1), TKV_ERR_BUFFER);
  EXPECT_EQ(tkv_codec_dequantize(c, nullptr, 4, y.data(), y.size()), TKV_ERR_ARGUMENT);
  std::vector<float> small(10);
  EXPECT_EQ(tkv_codec_mean(c, small.data(), small.size()), TKV_ERR_BUFFER);

  // Parameter structs not made by *_default_params() are refused.
  tkv_cache_params cp = tkv_cache_default_params();
  cp.struct_size = 0;
  tkv_cache* cache = nullptr;
  EXPECT_EQ(tkv_cache_create(&cp, &cache), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("struct_size"), std::string::npos) << tkv_last_error();
  cp = tkv_cache_default_params();
  cp.type_k = "nope";
  EXPECT_EQ(tkv_cache_create(&cp, &cache), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("nope"), std::string::npos) << tkv_last_error();
  cp = tkv_cache_default_params();
  cp.preset = "fastest";
  EXPECT_EQ(tkv_cache_create(&cp, &cache), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("fastest"), std::string::npos) << tkv_last_error();
  cp = tkv_cache_default_params();
  cp.policy_path = "/nonexistent/policy.bin";
  EXPECT_EQ(tkv_cache_create(&cp, &cache), TKV_ERR_IO);

  tkv_model* m = nullptr;
  EXPECT_EQ(tkv_model_load("/nonexistent/model.gguf", &m), TKV_ERR_IO);
  EXPECT_NE(std::string(tkv_last_error()).find("/nonexistent/model.gguf"), std::string::npos) << tkv_last_error();
  const std::string junk = "/tmp/tkv_capi_junk_" + std::to_string(getpid()) + ".gguf";
  FILE* f = std::fopen(junk.c_str(), "wb");
  std::fputs("GGUF but not really", f);
  std::fclose(f);
  EXPECT_EQ(tkv_model_load(junk.c_str(), &m), TKV_ERR_FORMAT);
  std::remove(junk.c_str());
  EXPECT_EQ(m, nullptr);

  // The message is the calling thread's.
  std::string other;
  std::thread([&] {
    tkv_codec* t = nullptr;
    EXPECT_EQ(tkv_codec_create("other-thread", 64, 1, &t), TKV_ERR_ARGUMENT);
    other = tkv_last_error();
  }).join();
  EXPECT_NE(other.find("other-thread"), std::string::npos);
  EXPECT_EQ(std::string(tkv_last_error()).find("other-thread"), std::string::npos) << tkv_last_error();
  EXPECT_STREQ(tkv_status_name(TKV_ERR_BUFFER), "TKV_ERR_BUFFER");
  tkv_codec_free(c);
  tkv_codec_free(nullptr);  // NULL is accepted by every *_free
  tkv_model_free(nullptr);
}

TEST(CApi, AttentionEqualsTheKernelOnTheSameCodes) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int d = 96, n_kv = 53, hkv = 2, hq = 6, n_q = 3;
  tkv_codec *kc = nullptr, *vc = nullptr;
  ASSERT_EQ(tkv_codec_create("tq3.5", d, seed, &kc), TKV_OK);
  ASSERT_EQ(tkv_codec_create("q8_0", d, seed, &vc), TKV_OK);
  auto k = gaussian(size_t(n_kv) * hkv * d, seed + 1), v = gaussian(k.size(), seed + 2);
  auto q = gaussian(size_t(n_q) * hq * d, seed + 3);
  auto mu = gaussian(size_t(hkv) * d, seed + 4, 0.5);
  std::vector<uint8_t> kb(size_t(n_kv) * hkv * tkv_codec_row_bytes(kc)), vb(size_t(n_kv) * hkv * tkv_codec_row_bytes(vc));
  ASSERT_EQ(tkv_codec_quantize(kc, k.data(), size_t(n_kv) * hkv, kb.data(), kb.size()), TKV_OK);
  ASSERT_EQ(tkv_codec_quantize(vc, v.data(), size_t(n_kv) * hkv, vb.data(), vb.size()), TKV_OK);
  std::vector<float> out_c(size_t(n_q) * hq * d), out_cpp(out_c.size());
  tkv_attention_params p = tkv_attention_default_params();
  p.q = q.data();
  p.n_q = n_q;
  p.n_q_heads = hq;
  p.n_kv = n_kv;
  p.n_kv_heads = hkv;
  p.head_dim = d;
  p.k_codec = kc;
  p.k_codes = kb.data();
  p.k_codes_bytes = kb.size();
  p.v_codec = vc;
  p.v_codes = vb.data();
  p.v_codes_bytes = vb.size();
  p.mu_k = mu.data();
  p.causal_offset = n_kv - n_q;
  p.out = out_c.data();
  p.out_floats = out_c.size();
  ASSERT_EQ(tkv_attention(&p), TKV_OK) << tkv_last_error();

  auto kcpp = make_codec("tq3.5", d, seed);
  auto vcpp = make_codec("q8_0", d, seed);
  AttentionArgs a;
  attention_shape(a, q.data(), n_q, hq, n_kv, hkv, d);
  a.k.codec = kcpp->get();
  a.k.data = kb.data();
  a.v.codec = vcpp->get();
  a.v.data = vb.data();
  a.mu_k = mu.data();
  a.causal_offset = n_kv - n_q;
  a.out = out_cpp.data();
  ASSERT_TRUE(attention(a).ok());
  EXPECT_EQ(0, std::memcmp(out_c.data(), out_cpp.data(), out_c.size() * sizeof(float)));

  // A byte count short of the last row, or a small output, is refused.
  p.k_codes_bytes = kb.size() - 1;
  EXPECT_EQ(tkv_attention(&p), TKV_ERR_BUFFER);
  EXPECT_NE(std::string(tkv_last_error()).find("K codes hold"), std::string::npos) << tkv_last_error();
  p.k_codes_bytes = kb.size();
  p.out_floats = out_c.size() - 1;
  EXPECT_EQ(tkv_attention(&p), TKV_ERR_BUFFER);
  p.out_floats = out_c.size();
  p.n_q_heads = 5;  // not a multiple of the KV heads
  EXPECT_EQ(tkv_attention(&p), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("multiple"), std::string::npos) << tkv_last_error();
  tkv_codec_free(kc);
  tkv_codec_free(vc);
}

TEST(CApi, CacheAppendAndAttentionEqualTheKvCache) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int L = 2, H = 2, d = 64, hq = 4, cap = 100;
  tkv_cache_params cp = tkv_cache_default_params();
  cp.n_layer = L;
  cp.n_kv_heads = H;
  cp.head_dim = d;
  cp.capacity = cap;
  cp.type_k = "tq4";
  cp.type_v = "tq3";
  cp.mean_tokens = 16;
  tkv_cache* c = nullptr;
  ASSERT_EQ(tkv_cache_create(&cp, &c), TKV_OK) << tkv_last_error();
  KvCacheOptions co;
  co.type_k = "tq4";
  co.type_v = "tq3";
  co.capacity = cap;
  co.mean_tokens = 16;
  auto kc = KvCache::create(L, H, d, co);
  ASSERT_TRUE(kc.ok());
  EXPECT_EQ(tkv_cache_bytes(c), (*kc)->k_bytes() + (*kc)->v_bytes());
  // Batches of 5, 20 (crossing the 16 rows that fix the means) and 1.
  int pos = 0;
  for (int n : {5, 20, 1, 1}) {
    for (int l = 0; l < L; ++l) {
      const auto k = gaussian(size_t(n) * H * d, seed + 7 * pos + l), v = gaussian(k.size(), seed + 7 * pos + l + 3);
      ASSERT_EQ(tkv_cache_append(c, l, pos, n, k.data(), k.size(), v.data(), v.size()), TKV_OK) << tkv_last_error();
      ASSERT_TRUE((*kc)->append(l, pos, n, k.data(), v.data()).ok());
      const auto q = gaussian(size_t(n) * hq * d, seed + 11 * pos + l);
      std::vector<float> a(q.size()), b(q.size());
      ASSERT_EQ(tkv_cache_attention(c, l, q.data(), n, hq, pos, 0.0f, 1, a.data(), a.size()), TKV_OK)
          << tkv_last_error();
      AttentionArgs args;
      args.q = q.data();
      args.n_q = n;
      args.n_q_heads = hq;
      args.n_kv = pos + n;
      args.n_kv_heads = H;
      args.d = d;
      args.k = (*kc)->k_rows(l);
      args.v = (*kc)->v_rows(l);
      args.mu_k = (*kc)->mu_k(l);
      args.mu_v = (*kc)->mu_v(l);
      args.causal_offset = pos;
      args.out = b.data();
      ASSERT_TRUE(attention(args).ok());
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "layer " << l << " pos " << pos;
    }
    pos += n;
  }
  EXPECT_EQ(tkv_cache_n_tokens(c), pos);
  // Queries past what a layer holds, a layer out of range, a short k array,
  // and positions past the capacity are refused.
  std::vector<float> q(hq * d), out(hq * d), k(size_t(H) * d);
  EXPECT_EQ(tkv_cache_attention(c, 0, q.data(), 1, hq, pos, 0.0f, 1, out.data(), out.size()), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("append the queries"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_cache_append(c, L, pos, 1, k.data(), k.size(), k.data(), k.size()), TKV_ERR_ARGUMENT);
  EXPECT_EQ(tkv_cache_append(c, 0, pos, 1, k.data(), k.size() - 1, k.data(), k.size()), TKV_ERR_ARGUMENT);
  EXPECT_EQ(tkv_cache_append(c, 0, cap, 1, k.data(), k.size(), k.data(), k.size()), TKV_ERR_MEMORY);
  tkv_cache_free(c);
}

// tkv_rotate (issue 36) is the codecs' Rotation: its bits forward, R^T
// undoes it, and sizes, dims and overlaps are checked.
TEST(CApi, RotateIsTheCodecsRotation) {
  for (int d : {64, 80}) {
    const uint64_t seed = fresh_seed() + d;
    SCOPED_TRACE("d " + std::to_string(d) + " seed " + std::to_string(seed));
    const int n = 5;
    const auto x = gaussian(size_t(n) * d, seed);
    std::vector<float> y(x.size()), back(x.size()), want(x.size());
    ASSERT_EQ(tkv_rotate(d, seed, x.data(), n, 0, y.data(), y.size()), TKV_OK) << tkv_last_error();
    auto r = Rotation::make(d, seed);
    ASSERT_TRUE(r.ok());
    for (int i = 0; i < n; ++i) (*r)->forward(&x[size_t(i) * d], &want[size_t(i) * d]);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float)));
    ASSERT_EQ(tkv_rotate(d, seed, y.data(), n, 1, back.data(), back.size()), TKV_OK);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-5) << i;
    EXPECT_EQ(tkv_rotate(d, seed, x.data(), n, 0, y.data(), y.size() - 1), TKV_ERR_BUFFER);
    EXPECT_EQ(tkv_rotate(1, seed, x.data(), n, 0, y.data(), y.size()), TKV_ERR_ARGUMENT);
    EXPECT_NE(std::string(tkv_last_error()).find("head_dim must be in [2, 4096]"), std::string::npos);
    EXPECT_EQ(tkv_rotate(d, seed, x.data(), n, 0, const_cast<float*>(x.data()) + 1, x.size()), TKV_ERR_ARGUMENT);
  }
}

TEST(CApi, LibraryExportsOnlyTkvSymbolsUnderAVersionedSoname) {
  const std::string syms = run_capture(std::string("nm -D --defined-only ") + TKV_LIBRARY);
  int tkv = 0;
  std::string others;
  size_t at = 0;
  while (at < syms.size()) {
    const size_t eol = syms.find('\n', at);
    const std::string line = syms.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    at = eol == std::string::npos ? syms.size() : eol + 1;
    const std::string name = line.substr(line.rfind(' ') + 1);
    if (name.empty()) continue;
    if (name.rfind("tkv_", 0) == 0) ++tkv;
    else if (name != "TURBOKV_1") others += name + " ";  // the version node of libturbokv.map
  }
  EXPECT_GE(tkv, 50) << syms;
  EXPECT_EQ(others, "") << "exported symbols other than tkv_*";
  const std::string dyn = run_capture(std::string("objdump -p ") + TKV_LIBRARY);
  EXPECT_NE(dyn.find("SONAME               libturbokv.so.1"), std::string::npos) << dyn;
  // One version for the binary, the library and its file name.
  const std::string v = tkv_version();
  EXPECT_EQ(run_capture(std::string(TKV_BINARY) + " --version"), "turbokv " + v + "\n");
  EXPECT_NE(std::string(TKV_LIBRARY).find("libturbokv.so." + v), std::string::npos) << TKV_LIBRARY;
}

// `make install PREFIX=...` (cmake --install) and the C example compiled
// with -std=c99 -Wall -Werror against the installed header, library and
// pkg-config file alone, then run on the reference model.
TEST(CApi, CExampleBuildsAgainstTheInstalledFilesAndRuns) {
  TKV_NEED_SHARED(kModel);
  const std::string dir = "/tmp/tkv_install_" + std::to_string(getpid());
#ifdef TKV_SANITIZED
  const std::string cflags = "-fsanitize=address,undefined";  // the library is instrumented
#else
  const std::string cflags = "";
#endif
  const std::string cmd = std::string(TKV_SOURCE_DIR) + "/scripts/check-install.sh " + TKV_BUILD_DIR + " " + dir +
                          " " + shared_path(kModel) + " '" + cflags + "' 2>&1";
  const std::string out = run_capture(cmd + "; echo \"rc=$?\"");
  EXPECT_NE(out.find("rc=0"), std::string::npos) << out;
  EXPECT_NE(out.find("codec tq4, d = 128: 66 bytes per row (4.125 bits per value)"), std::string::npos) << out;
  EXPECT_NE(out.find("an unknown format: TKV_ERR_ARGUMENT"), std::string::npos) << out;
  EXPECT_NE(out.find("generated 24 tokens"), std::string::npos) << out;
#ifdef TKV_PYTHON_BUILT  // (not in the sanitizer build)
  EXPECT_NE(out.find("python module " + std::string(tkv_version()) + " from " + dir + "/lib/python3"),
            std::string::npos) << out;
#endif
  // The example's text is the engine's greedy text for the same prompt.
  const std::string run = run_capture(std::string(TKV_BINARY) + " run -m " + shared_path(kModel) +
                                      " -p 'Once upon a time' -n 24 --temp 0 -c 256 -t 2 2>/dev/null");
  ASSERT_FALSE(run.empty());
  EXPECT_NE(out.find(run), std::string::npos) << "run printed:\n" << run << "\nthe example:\n" << out;
  std::system(("rm -rf " + dir).c_str());
}

// ------------------------------------------------------- models and contexts

struct ModelHandle {
  tkv_model* m = nullptr;
  ModelHandle() {
    if (tkv_model_load(shared_path(kModel).c_str(), &m) != TKV_OK) ADD_FAILURE() << tkv_last_error();
  }
  ~ModelHandle() { tkv_model_free(m); }
};

tkv_context* make_context(tkv_model* m, const char* type, int n_ctx = 256) {
  tkv_context_params p = tkv_context_default_params();
  p.type_k = p.type_v = type;
  p.n_ctx = n_ctx;
  p.threads = 2;
  tkv_context* c = nullptr;
  EXPECT_EQ(tkv_context_create(m, &p, &c), TKV_OK) << tkv_last_error();
  return c;
}

std::vector<int32_t> context_tokens(const tkv_context* c) {
  std::vector<int32_t> t(tkv_context_n_tokens(c));
  size_t n = 0;
  EXPECT_EQ(tkv_context_tokens(c, t.data(), t.size(), &n), TKV_OK);
  return t;
}

// The model's config and tensors (issue 36: a forward pass of one's own,
// examples/torch_llama.py): the GGUF's tensors decoded to floats as the
// weight readers decode them, and the config as JSON.
TEST(CApi, ModelConfigAndTensorsAreTheFiles) {
  TKV_NEED_SHARED(kModel);
  ModelHandle h;
  ASSERT_NE(h.m, nullptr);
  auto cpp = Model::load(shared_path(kModel));
  ASSERT_TRUE(cpp.ok());
  const auto& ts = (*cpp)->file().tensors();
  ASSERT_EQ(tkv_model_n_tensors(h.m), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const char* name = nullptr;
    const char* type = nullptr;
    int64_t dims[4];
    int32_t nd = 0;
    ASSERT_EQ(tkv_model_tensor_info(h.m, i, &name, &type, dims, &nd), TKV_OK);
    EXPECT_EQ(name, ts[i].name);
    EXPECT_EQ(size_t(nd), ts[i].dims.size());
    for (int j = 0; j < nd; ++j) EXPECT_EQ(uint64_t(dims[j]), ts[i].dims[j]);
  }
  const gguf::Tensor* t = (*cpp)->file().tensor("blk.0.attn_k.weight");
  ASSERT_NE(t, nullptr);
  std::vector<float> w(t->n_elements), row(t->dims[0]);
  ASSERT_EQ(tkv_model_tensor_f32(h.m, "blk.0.attn_k.weight", w.data(), w.size()), TKV_OK) << tkv_last_error();
  const size_t rb = t->n_bytes / (t->n_elements / t->dims[0]);
  unpack_f32(t->type, t->data + rb, 0, int64_t(t->dims[0]), row.data());  // row 1
  EXPECT_EQ(0, std::memcmp(row.data(), &w[t->dims[0]], row.size() * sizeof(float)));
  EXPECT_EQ(tkv_model_tensor_f32(h.m, "blk.0.attn_k.weight", w.data(), w.size() - 1), TKV_ERR_BUFFER);
  EXPECT_EQ(tkv_model_tensor_f32(h.m, "nope", w.data(), w.size()), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("no tensor named 'nope'"), std::string::npos);
  EXPECT_EQ(tkv_model_tensor_info(h.m, ts.size(), nullptr, nullptr, nullptr, nullptr), TKV_ERR_ARGUMENT);
  size_t len = 0;
  char small[8];
  EXPECT_EQ(tkv_model_config_json(h.m, small, sizeof small, &len), TKV_ERR_BUFFER);
  std::vector<char> json(len + 1);
  ASSERT_EQ(tkv_model_config_json(h.m, json.data(), json.size(), &len), TKV_OK);
  const std::string j(json.data(), len);
  const ModelConfig& c = (*cpp)->config();
  EXPECT_NE(j.find("\"arch\":\"" + c.arch + "\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"n_embd\":" + std::to_string(c.n_embd)), std::string::npos) << j;
  EXPECT_NE(j.find("\"rope_neox\":false"), std::string::npos) << j;
}

TEST(CApi, GreedyGenerationIsTheEnginesTokenForToken) {
  TKV_NEED_SHARED(kModel);
  ModelHandle h;
  ASSERT_NE(h.m, nullptr);
  tkv_context* ctx = make_context(h.m, "tq3");
  tkv_sampler_params sp = tkv_sampler_default_params();
  sp.temperature = 0;
  const std::string prompt = "The little dog";
  std::string streamed;
  auto cb = [](int32_t, const char* t, size_t n, void* u) -> int {
    static_cast<std::string*>(u)->append(t, n);
    return 0;
  };
  int32_t made = 0;
  ASSERT_EQ(tkv_generate(ctx, prompt.data(), prompt.size(), 30, &sp, cb, &streamed, &made), TKV_OK) << tkv_last_error();
  const auto got = context_tokens(ctx);

  // The same with the C++ engine: prompt in one pass, then one token at a time.
  auto model = Model::load(shared_path(kModel));
  ASSERT_TRUE(model.ok());
  const Model& M = **model;
  KvCacheOptions co;
  co.type_k = co.type_v = "tq3";
  co.capacity = 256;
  auto cache = KvCache::create(M.config().kv_shape(), co);
  std::vector<int32_t> want = M.tokenizer().encode(prompt, true);
  std::vector<float> logits(M.config().n_vocab);
  ASSERT_TRUE(M.forward(want.data(), int(want.size()), 0, **cache, 2, logits.data()).ok());
  const size_t prompt_n = want.size();
  for (int i = 0; i < 30; ++i) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next == M.tokenizer().eos()) break;
    want.push_back(next);
    ASSERT_TRUE(M.forward(&next, 1, int(want.size()) - 1, **cache, 2, logits.data()).ok());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(made, int32_t(want.size() - prompt_n));
  EXPECT_EQ(streamed, M.tokenizer().decode(std::vector<int32_t>(want.begin() + prompt_n, want.end())));
  // The context's logits are those after its last token.
  const float* l = tkv_context_logits(ctx);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(0, std::memcmp(l, logits.data(), logits.size() * sizeof(float)));
  // Tokenizer round trip through the C API.
  size_t n = 0;
  std::vector<int32_t> ids(64);
  ASSERT_EQ(tkv_tokenize(h.m, prompt.data(), prompt.size(), 1, ids.data(), ids.size(), &n), TKV_OK);
  ids.resize(n);
  EXPECT_EQ(ids, M.tokenizer().encode(prompt, true));
  EXPECT_EQ(tkv_tokenize(h.m, prompt.data(), prompt.size(), 1, ids.data(), 1, &n), TKV_ERR_BUFFER);
  EXPECT_EQ(n, ids.size()) << "the size needed";
  char text[256];
  size_t len = 0;
  ASSERT_EQ(tkv_detokenize(h.m, ids.data(), ids.size(), text, sizeof text, &len), TKV_OK);
  EXPECT_EQ(std::string(text, len), M.tokenizer().decode(ids));
  const int32_t bad = tkv_model_n_vocab(h.m);
  EXPECT_EQ(tkv_detokenize(h.m, &bad, 1, text, sizeof text, &len), TKV_ERR_ARGUMENT);
  tkv_context_free(ctx);
}

TEST(CApi, SavedContextGoesOnAsIfNeverSaved) {
  TKV_NEED_SHARED(kModel);
  ModelHandle h;
  ASSERT_NE(h.m, nullptr);
  const std::string path = "/tmp/tkv_capi_ctx_" + std::to_string(getpid()) + ".tkvc";
  tkv_sampler_params sp = tkv_sampler_default_params();
  sp.temperature = 0;
  tkv_context* a = make_context(h.m, "tq4");
  const std::string prompt = "Once upon a time there was a girl who";
  ASSERT_EQ(tkv_generate(a, prompt.data(), prompt.size(), 80, &sp, nullptr, nullptr, nullptr), TKV_OK);
  ASSERT_GT(tkv_context_n_tokens(a), 64) << "past the rows that fix the means";
  ASSERT_EQ(tkv_context_save(a, path.c_str()), TKV_OK) << tkv_last_error();
  tkv_context* b = make_context(h.m, "tq4");
  ASSERT_EQ(tkv_context_load(b, path.c_str()), TKV_OK) << tkv_last_error();
  EXPECT_EQ(context_tokens(a), context_tokens(b));
  EXPECT_EQ(tkv_context_logits(b), nullptr) << "no logits until a token is evaluated";
  // Both go on from the same next token.
  const int32_t next = 42;
  ASSERT_EQ(tkv_eval(a, &next, 1), TKV_OK);
  ASSERT_EQ(tkv_eval(b, &next, 1), TKV_OK);
  ASSERT_EQ(tkv_generate(a, "", 0, 20, &sp, nullptr, nullptr, nullptr), TKV_OK);
  ASSERT_EQ(tkv_generate(b, "", 0, 20, &sp, nullptr, nullptr, nullptr), TKV_OK);
  EXPECT_EQ(context_tokens(a), context_tokens(b));
  // Another format's context refuses the file and stays as it was; a missing
  // file is an I/O error.
  tkv_context* c = make_context(h.m, "q8_0");
  const std::string p2 = "Hello";
  ASSERT_EQ(tkv_generate(c, p2.data(), p2.size(), 3, &sp, nullptr, nullptr, nullptr), TKV_OK);
  const auto before = context_tokens(c);
  EXPECT_EQ(tkv_context_load(c, path.c_str()), TKV_ERR_FORMAT);
  EXPECT_NE(std::string(tkv_last_error()).find("tq4"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(context_tokens(c), before);
  EXPECT_EQ(tkv_context_load(c, "/nonexistent/ctx.tkvc"), TKV_ERR_IO);
  std::remove(path.c_str());
  tkv_context_free(a);
  tkv_context_free(b);
  tkv_context_free(c);
}

TEST(CApi, ContextLimitsAndCallbackStops) {
  TKV_NEED_SHARED(kModel);
  ModelHandle h;
  ASSERT_NE(h.m, nullptr);
  tkv_context* ctx = make_context(h.m, "tq4", 16);
  std::vector<int32_t> t(17, 5);
  EXPECT_EQ(tkv_eval(ctx, t.data(), t.size()), TKV_ERR_MEMORY);
  EXPECT_NE(std::string(tkv_last_error()).find("n_ctx 16"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_context_n_tokens(ctx), 0);
  t = {1, 5, tkv_model_n_vocab(h.m)};
  EXPECT_EQ(tkv_eval(ctx, t.data(), t.size()), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("token 2"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_context_n_tokens(ctx), 0) << "nothing evaluated";
  // Generation stops at the context's end, and when the callback says so.
  tkv_sampler_params sp = tkv_sampler_default_params();
  sp.temperature = 0;
  int32_t made = 0;
  EXPECT_EQ(tkv_generate(ctx, "Once", 4, 100, &sp, nullptr, nullptr, &made), TKV_OK) << tkv_last_error();
  EXPECT_EQ(tkv_context_n_tokens(ctx), 16);
  tkv_context_free(ctx);
  ctx = make_context(h.m, "tq4");
  int calls = 0;
  auto stop_at_3 = [](int32_t, const char*, size_t, void* u) -> int { return ++*static_cast<int*>(u) == 3; };
  EXPECT_EQ(tkv_generate(ctx, "Once", 4, 100, &sp, stop_at_3, &calls, &made), TKV_ERR_STOPPED);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(made, 3);
  // A bad sampling parameter names itself.
  sp.top_p = 2;
  EXPECT_EQ(tkv_generate(ctx, "x", 1, 1, &sp, nullptr, nullptr, nullptr), TKV_ERR_ARGUMENT);
  EXPECT_NE(std::string(tkv_last_error()).find("top_p"), std::string::npos) << tkv_last_error();
  // Truncation inside the rows that fixed the means is refused; to 0 works.
  EXPECT_EQ(tkv_context_truncate(ctx, 2), TKV_OK) << "before 64 rows the means are not fixed yet";
  tkv_context_free(ctx);
}

// A batch whose logits are not finite (a NaN row of the embedding) fails
// with TKV_ERR_VALUE and is cut back out of the context, which goes on as if
// it had never been evaluated.
TEST(CApi, AFailedBatchLeavesTheContextAsItWas) {
  const std::string path = "/tmp/tkv_capi_nan_" + std::to_string(getpid()) + ".gguf";
  small_model(path);
  const int32_t bad = 77;
  poison_gguf(path, "token_embd.weight", uint64_t(bad) * 64);  // F32 rows of dim 64
  tkv_model* m = nullptr;
  ASSERT_EQ(tkv_model_load(path.c_str(), &m), TKV_OK) << tkv_last_error();
  tkv_context *a = make_context(m, "tq4"), *b = make_context(m, "tq4");
  const int32_t first[3] = {1, 40, 50}, poisoned[2] = {60, bad}, next = 60;
  ASSERT_EQ(tkv_eval(a, first, 3), TKV_OK);
  EXPECT_EQ(tkv_eval(a, poisoned, 2), TKV_ERR_VALUE);
  EXPECT_NE(std::string(tkv_last_error()).find("not finite"), std::string::npos) << tkv_last_error();
  EXPECT_NE(std::string(tkv_last_error()).find("keeps its 3 tokens"), std::string::npos) << tkv_last_error();
  EXPECT_EQ(tkv_context_n_tokens(a), 3);
  EXPECT_EQ(tkv_context_logits(a), nullptr);
  ASSERT_EQ(tkv_eval(a, &next, 1), TKV_OK) << tkv_last_error();
  const int32_t clean[4] = {1, 40, 50, next};
  ASSERT_EQ(tkv_eval(b, clean, 3), TKV_OK);
  ASSERT_EQ(tkv_eval(b, clean + 3, 1), TKV_OK);
  const size_t V = size_t(tkv_model_n_vocab(m));
  EXPECT_EQ(0, std::memcmp(tkv_context_logits(a), tkv_context_logits(b), V * sizeof(float)));
  tkv_context_free(a);
  tkv_context_free(b);
  tkv_model_free(m);
  std::remove(path.c_str());
}

TEST(CApi, CalibrateWritesTheEnginesPolicyAndContextsUseIt) {
  const std::string wiki = "data/text/wikitext-2-raw-test.txt";
  TKV_NEED_SHARED(kModel, wiki);
  ModelHandle h;
  ASSERT_NE(h.m, nullptr);
  auto text = read_text_file(shared_path(wiki));
  ASSERT_TRUE(text.ok());
  const std::string t = text->substr(0, 20000);
  const std::string dir = "/tmp/tkv_capi_pol_" + std::to_string(getpid());
  const std::string a = dir + "_c.tkvp", b = dir + "_cpp.tkvp", stopped = dir + "_stopped.tkvp";
  tkv_calibrate_params p = tkv_calibrate_default_params();
  p.tokens = 256;
  p.n_ctx = 64;
  p.threads = 2;
  std::vector<std::string> lines;
  p.user_data = &lines;
  p.progress = [](const char* line, void* u) -> int {
    static_cast<std::vector<std::string>*>(u)->push_back(line);
    return 0;
  };
  ASSERT_EQ(tkv_calibrate(h.m, t.data(), t.size(), &p, a.c_str()), TKV_OK) << tkv_last_error();
  EXPECT_EQ(lines.size(), 5u) << "4 chunks collected, then the fit";
  // The engine's calibrate with the same options writes the same file.
  auto model = Model::load(shared_path(kModel));
  ASSERT_TRUE(model.ok());
  CalibrateOptions o;
  o.tokens = 256;
  o.n_ctx = 64;
  o.threads = 2;
  auto pol = calibrate(**model, normalize_newlines(t), o);
  ASSERT_TRUE(pol.ok()) << pol.error();
  ASSERT_TRUE(write_kv_policy(b, *pol).ok());
  EXPECT_EQ(read_text_file(a).value(), read_text_file(b).value());
  // A context on the policy stores calibrated rows at its width.
  tkv_context_params cp = tkv_context_default_params();
  cp.policy_path = a.c_str();
  cp.n_ctx = 128;
  tkv_context* ctx = nullptr;
  ASSERT_EQ(tkv_context_create(h.m, &cp, &ctx), TKV_OK) << tkv_last_error();
  EXPECT_NEAR(tkv_context_k_bits(ctx), 4.25, 1e-9);
  tkv_sampler_params sp = tkv_sampler_default_params();
  sp.temperature = 0;
  EXPECT_EQ(tkv_generate(ctx, "Once", 4, 8, &sp, nullptr, nullptr, nullptr), TKV_OK) << tkv_last_error();
  tkv_context_free(ctx);
  // A progress callback that stops: nothing written.
  p.progress = [](const char*, void*) -> int { return 1; };
  EXPECT_EQ(tkv_calibrate(h.m, t.data(), t.size(), &p, stopped.c_str()), TKV_ERR_STOPPED);
  FILE* f = std::fopen(stopped.c_str(), "rb");
  EXPECT_EQ(f, nullptr);
  if (f) std::fclose(f);
  std::remove(a.c_str());
  std::remove(b.c_str());
}

}  // namespace
}  // namespace tkv
