// `turbokv serve` end to end: an Engine and HttpServer in this process on a
// free 127.0.0.1 port, driven with cpp-httplib's client; the reference model.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gen_model.h"
#include "model/model.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "test_cli.h"

namespace tkv {
namespace {

using json = nlohmann::json;
const std::string kRef = std::string(TKV_SHARED_DIR) + "/models/ref-5m/ref-5m-f32.gguf";

const Model& ref_model() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::load(kRef);
    EXPECT_TRUE(r.ok()) << r.error();
    return std::move(*r);
  }();
  return *m;
}

struct TestServer {
  std::unique_ptr<server::Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  std::thread thread;
  int port = 0;
  TestServer(server::EngineOptions eo, server::HttpOptions ho = {}, const std::string& fmt = "tq4",
             const Model& model = ref_model()) {
    KvCacheOptions co;
    co.type_k = co.type_v = fmt;
    if (eo.kv_budget == 0) eo.kv_budget = size_t(64) << 20;
    if (eo.threads <= 0) eo.threads = 2;
    auto e = server::Engine::create(model, co, eo);
    EXPECT_TRUE(e.ok()) << e.error();
    engine = std::move(*e);
    ho.port = 0;
    ho.model_id = "ref-5m";
    http = std::make_unique<server::HttpServer>(model, *engine, ho);
    auto p = http->bind();
    EXPECT_TRUE(p.ok()) << p.error();
    port = *p;
    thread = std::thread([this] { http->serve(); });
  }
  ~TestServer() {
    engine->stop();
    http->stop();
    thread.join();
  }
  httplib::Client client(const std::string& key = "") const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    if (!key.empty()) c.set_bearer_token_auth(key.c_str());
    return c;
  }
  json post(const std::string& path, const json& body, int want = 200) const {
    auto c = client();
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return {};
    EXPECT_EQ(r->status, want) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  // One gauge or counter of /metrics.
  double metric(const std::string& name) const {
    auto c = client();
    auto r = c.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    const std::string key = "\nturbokv_" + name + " ";
    const size_t at = r->body.find(key);
    EXPECT_NE(at, std::string::npos) << name;
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size()));
  }
};

json completion(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

std::string text_of(const json& j) { return j.is_object() ? j["choices"][0]["text"].get<std::string>() : ""; }

// Streams a request; returns the concatenated text and the last finish_reason.
std::pair<std::string, std::string> stream(const TestServer& s, json body) {
  body["stream"] = true;
  auto c = s.client();
  std::string raw;
  auto r = c.Post("/v1/completions", httplib::Headers{}, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200);
  if (r) raw = r->body;
  std::string text, finish;
  size_t pos = 0;
  bool done = false;
  while ((pos = raw.find("data: ", pos)) != std::string::npos) {
    const size_t end = raw.find("\n\n", pos);
    const std::string ev = raw.substr(pos + 6, end - pos - 6);
    pos = end;
    if (ev == "[DONE]") {
      done = true;
      break;
    }
    const json j = json::parse(ev);
    text += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done) << raw;
  return {text, finish};
}

// A long text for prompts: WikiText-2's test set.
std::string wiki_words(size_t n_chars) {
  std::ifstream in(std::string(TKV_SHARED_DIR) + "/data/text/wikitext-2-raw-test.txt", std::ios::binary);
  std::string t{std::istreambuf_iterator<char>(in), {}};
  // Never a stand-in text: prompts of other lengths would test something else.
  if (t.size() < 1000 + n_chars) {
    ADD_FAILURE() << "missing or short: " << TKV_SHARED_DIR << "/data/text/wikitext-2-raw-test.txt (these prompts need it)";
    return std::string();
  }
  return t.substr(1000, n_chars);
}

class ServerCli : public Cli {};

// A model whose logits are NaN (a NaN norm weight): each request gets a 500
// that says so, in full and streamed, and the server goes on serving.
TEST_F(ServerCli, NaNLogitsEndTheRequestWithAnErrorNotText) {
  GenModelOptions g;
  g.layers = 1;
  ASSERT_TRUE(generate_model(g, nullptr, path("nan.gguf")).ok());
  {
    auto f = gguf::File::open(path("nan.gguf"));
    ASSERT_TRUE(f.ok());
    const uint64_t at = (*f)->data_offset() + (*f)->tensor("output_norm.weight")->offset;
    f->reset();
    std::fstream io(path("nan.gguf"), std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(static_cast<std::streamoff>(at));
    const float nan = std::nanf("");
    io.write(reinterpret_cast<const char*>(&nan), 4);
  }
  auto m = Model::load(path("nan.gguf"));
  ASSERT_TRUE(m.ok()) << m.error();
  TestServer s({}, {}, "tq4", **m);
  for (int i = 0; i < 2; ++i) {
    const json r = s.post("/v1/completions", completion("hello", 4), 500);
    ASSERT_TRUE(r.is_object());
    EXPECT_NE(r["error"]["message"].get<std::string>().find("NaN or Inf"), std::string::npos) << r.dump();
  }
  json body = completion("hello", 4);
  body["stream"] = true;
  auto c = s.client();
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("NaN or Inf"), std::string::npos) << r->body;
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(s.metric("requests_running"), 0);
  EXPECT_EQ(s.metric("kv_blocks_used"), 0);
}

TEST_F(ServerCli, GreedyCompletionEqualsRunAndStreamsTheSameText) {
  server::EngineOptions eo;
  eo.ctx = 1024;
  TestServer s(eo);
  const std::string prompt = "The history of the city begins";
  const json r = s.post("/v1/completions", completion(prompt, 40));
  const CliResult run = this->run("run -m '" + kRef + "' -p '" + prompt + "' -n 40 --temp 0 -c 1024 --no-display-prompt");
  ASSERT_EQ(run.rc, 0) << run.err;
  ASSERT_FALSE(text_of(r).empty());
  EXPECT_EQ(text_of(r) + "\n", run.out);
  // Usage: the prompt's tokens (with BOS, as /tokenize counts them) and every generated token.
  const json tk = s.post("/tokenize", {{"content", prompt}, {"add_special", true}});
  EXPECT_EQ(r["usage"]["prompt_tokens"], tk["tokens"].size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 40);
  EXPECT_EQ(r["usage"]["total_tokens"], 40 + tk["tokens"].size());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const auto [text, finish] = stream(s, completion(prompt, 40));
  EXPECT_EQ(text, text_of(r));
  EXPECT_EQ(finish, "length");
}

TEST(Server, ConcurrentGreedyRequestsGiveTheTextsOfSequentialOnes) {
  server::EngineOptions eo;
  eo.ctx = 512;
  eo.n_parallel = 4;
  TestServer s(eo);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(wiki_words(40 + 60 * i).substr(7 * i));
  std::vector<std::string> alone, together(prompts.size());
  for (const auto& p : prompts) alone.push_back(text_of(s.post("/v1/completions", completion(p, 24))));
  std::vector<std::thread> th;
  for (size_t i = 0; i < prompts.size(); ++i)
    th.emplace_back([&, i] { together[i] = text_of(s.post("/v1/completions", completion(prompts[i], 24))); });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "request " << i;
  EXPECT_GT(s.metric("requests_running_peak"), 1);
  EXPECT_EQ(s.metric("kv_blocks_used"), 0);
}

TEST(Server, SharedPrefixEvaluatesOnlyNewTokensAndMatchesAColdServer) {
  server::EngineOptions eo;
  eo.ctx = 2048;
  const std::string doc = wiki_words(4200);
  const std::string q1 = doc + "\nQuestion: what is the first thing?", q2 = doc + "\nQuestion: and the second one?";
  std::string warm_text;
  int p2 = 0;
  {
    TestServer s(eo);
    const json tk = s.post("/tokenize", {{"content", doc}, {"add_special", true}});
    ASSERT_GE(tk["tokens"].size(), 1000u);
    s.post("/v1/completions", completion(q1, 16));
    const double before = s.metric("prompt_tokens_evaluated_total");
    const json r2 = s.post("/v1/completions", completion(q2, 16));
    p2 = r2["usage"]["prompt_tokens"];
    const double hit = s.metric("prefix_cache_hit_tokens_total");
    const int shared = static_cast<int>(tk["tokens"].size()) / 256 * 256;  // whole 256-token blocks of the document
    EXPECT_GE(hit, shared);
    EXPECT_EQ(s.metric("prompt_tokens_evaluated_total") - before, p2 - hit);
    EXPECT_GT(s.metric("prefix_cache_hits_total"), 0);
    warm_text = text_of(r2);
  }
  TestServer cold(eo);
  const json r = cold.post("/v1/completions", completion(q2, 16));
  EXPECT_EQ(cold.metric("prefix_cache_hit_tokens_total"), 0);
  EXPECT_EQ(r["usage"]["prompt_tokens"], p2);
  EXPECT_EQ(text_of(r), warm_text);
}

TEST(Server, ABudgetOfTwoContextsRunsTwoOfFourAndFreesEveryBlock) {
  server::EngineOptions eo;
  eo.ctx = 512;
  eo.n_parallel = 4;
  KvCacheOptions co;
  const ModelConfig& c = ref_model().config();
  auto layout = KvLayout::create(c.n_layer, c.n_head_kv, c.head_dim, co);
  ASSERT_TRUE(layout.ok());
  eo.kv_budget = (*layout)->bytes_per_token() * 1024;  // two contexts of 512
  TestServer s(eo);
  EXPECT_EQ(s.engine->contexts_that_fit(), 2);
  std::vector<json> out(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)  // no max_tokens: each may need its whole context
    th.emplace_back([&, i] {
      out[i] = s.post("/v1/completions", {{"prompt", wiki_words(200 + 50 * i)}, {"temperature", 0}});
    });
  for (auto& t : th) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(out[i].is_object());
    EXPECT_FALSE(text_of(out[i]).empty());
    EXPECT_EQ(out[i]["usage"]["total_tokens"].get<int>() <= 512, true);
  }
  EXPECT_EQ(s.metric("requests_running_peak"), 2);
  EXPECT_EQ(s.metric("kv_blocks_used"), 0);
  EXPECT_EQ(s.metric("requests_running"), 0);
  EXPECT_EQ(s.metric("requests_queued"), 0);
}

TEST(Server, BadRequestsGetErrorsThatNameTheField) {
  server::EngineOptions eo;
  eo.ctx = 256;
  server::HttpOptions ho;
  ho.max_body = 4096;
  TestServer s(eo, ho);
  auto c = s.client();
  auto expect = [&](const std::string& path, const std::string& body, int status, const std::string& words) {
    auto r = c.Post(path.c_str(), body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, status) << body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(words), std::string::npos) << r->body;
  };
  expect("/v1/completions", "{not json", 400, "JSON");
  expect("/v1/completions", R"({"prompt": 5})", 400, "prompt");
  expect("/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "temperature");
  expect("/v1/completions", R"({"prompt": "x", "top_p": 7})", 400, "top_p");
  expect("/v1/completions", R"({"prompt": "x", "max_tokens": -5})", 400, "max_tokens");
  expect("/v1/chat/completions", R"({"messages": []})", 400, "messages");
  expect("/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "role");
  expect("/detokenize", R"({"tokens": [1, -4]})", 400, "tokens");
  const std::string longp = wiki_words(5000);
  auto r = c.Post("/v1/completions", completion(longp, 4).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);  // over the 4 KiB body limit
  const std::string mid = wiki_words(1500);
  r = c.Post("/v1/completions", completion(mid, 4).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("context holds 256"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("tokens"), std::string::npos) << r->body;
  auto g = c.Get("/v1/nothing");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 404);
  EXPECT_EQ(s.metric("kv_blocks_used"), 0);
}

TEST(Server, ApiKeyGuardsEveryEndpointButHealth) {
  server::EngineOptions eo;
  eo.ctx = 256;
  server::HttpOptions ho;
  ho.api_key = "sesame";
  TestServer s(eo, ho);
  auto none = s.client(), wrong = s.client("open"), right = s.client("sesame");
  EXPECT_EQ(none.Get("/health")->status, 200);
  for (const char* path : {"/v1/models", "/metrics", "/slots", "/props"}) {
    EXPECT_EQ(none.Get(path)->status, 401) << path;
    EXPECT_EQ(wrong.Get(path)->status, 401) << path;
    EXPECT_EQ(right.Get(path)->status, 200) << path;
  }
  EXPECT_EQ(none.Post("/v1/completions", completion("a", 2).dump(), "application/json")->status, 401);
  EXPECT_EQ(right.Post("/v1/completions", completion("a", 2).dump(), "application/json")->status, 200);
}

TEST(Server, AClientThatLeavesMidStreamFreesItsBlocks) {
  server::EngineOptions eo;
  eo.ctx = 1024;
  TestServer s(eo);
  json body = completion("Once upon a time", -1);
  body.erase("max_tokens");
  body["stream"] = true;
  auto c = s.client();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };  // hang up after two chunks
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  EXPECT_FALSE(c.send(req, res, err));  // the client cancelled
  // The engine notices at its next write; wait for it (bounded).
  for (int i = 0; i < 400 && (s.metric("requests_running") > 0 || s.metric("kv_blocks_used") > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_EQ(s.metric("requests_running"), 0);
  EXPECT_EQ(s.metric("kv_blocks_used"), 0);
  EXPECT_EQ(s.metric("requests_cancelled_total"), 1);
  EXPECT_FALSE(text_of(s.post("/v1/completions", completion("After that", 4))).empty());  // still serving
}

TEST_F(ServerCli, SlotSavedAndRestoredIntoANewServerContinuesIdentically) {
  server::EngineOptions eo;
  eo.ctx = 512;
  eo.n_parallel = 1;
  eo.block_tokens = 16;
  eo.keep_slot_cache = true;
  server::HttpOptions ho;
  ho.slot_save_path = path("");
  const std::string first = wiki_words(500);
  std::string cont1, follow;
  {
    TestServer s(eo, ho);
    const std::string a = text_of(s.post("/v1/completions", completion(first, 20)));
    const json saved = s.post("/slots/0?action=save", {{"filename", "slot0.bin"}});
    EXPECT_GT(saved["n_saved"].get<int>(), 64);
    follow = first + a + " And then";
    cont1 = text_of(s.post("/v1/completions", completion(follow, 20)));
    EXPECT_GT(s.metric("prefix_cache_hit_tokens_total"), 64);
    s.post("/slots/0?action=save", {{"filename", "../escape.bin"}}, 400);
  }
  TestServer s2(eo, ho);
  const json restored = s2.post("/slots/0?action=restore", {{"filename", "slot0.bin"}});
  EXPECT_GT(restored["n_restored"].get<int>(), 64);
  EXPECT_EQ(text_of(s2.post("/v1/completions", completion(follow, 20))), cont1);
  EXPECT_GT(s2.metric("prefix_cache_hit_tokens_total"), 64);
  s2.post("/slots/0?action=restore", {{"filename", "missing.bin"}}, 400);
}

}  // namespace
}  // namespace tkv
