// The engine-independent layer of `turbokv serve`: request validation and
// response shapes (ServerApi), chat templates (ChatTemplate), and streaming
// text with stop strings and split UTF-8 (TextStream); plus the sampler's
// presence/frequency penalties that the API exposes.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "server/chat_template.h"
#include "server/openai_api.h"
#include "server/text_stream.h"

namespace tkv::server {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- ServerApi

// Parses body (completions or chat) expecting a 400 that names `param` both in
// ApiError::param and, quoted, in the message.
void expect_bad(const std::string& body, bool chat, const std::string& param) {
  CompletionRequest r;
  auto e = parse_completion_request(body, chat, r);
  ASSERT_TRUE(e.has_value()) << "accepted: " << body;
  EXPECT_EQ(e->status, 400) << body;
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_EQ(e->param, param) << body << " -> " << e->message;
  EXPECT_NE(e->message.find("'" + param + "'"), std::string::npos) << body << " -> " << e->message;
}

std::string chat_with(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + (extra.empty() ? "" : "," + extra) + "}";
}
std::string completion_with(const std::string& extra) {
  return R"({"prompt":"hi")" + (extra.empty() ? "" : "," + extra) + "}";
}

TEST(ServerApi, GoodChatRequestParsesEveryField) {
  const std::string body = R"({
    "model": "m1", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "system", "content": "be brief"},
                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                 {"role": "assistant", "content": null},
                 {"role": "user", "content": "\u00e9"}],
    "max_tokens": 7, "temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0.1,
    "presence_penalty": -2, "frequency_penalty": 2, "repeat_penalty": 1.1, "seed": 42,
    "stop": ["x", "yy"], "n": 1, "logprobs": false, "user": "ignored", "tools": []})";
  CompletionRequest r;
  auto e = parse_completion_request(body, true, r);
  ASSERT_FALSE(e.has_value()) << e->message;
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "m1");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "\xC3\xA9");
  const SamplingRequest& s = r.sampling;
  EXPECT_EQ(s.max_tokens, 7);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_EQ(s.presence_penalty, -2.0f);
  EXPECT_EQ(s.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(s.repeat_penalty, 1.1f);
  EXPECT_TRUE(s.has_seed);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.stop, (std::vector<std::string>{"x", "yy"}));
}

TEST(ServerApi, DefaultsWhenFieldsAbsentOrNull) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(completion_with(R"("stop":null,"seed":null,"max_tokens":null)"), false, r));
  EXPECT_FALSE(r.chat);
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  const SamplingRequest d;
  EXPECT_EQ(r.sampling.max_tokens, -1);
  EXPECT_EQ(r.sampling.temperature, d.temperature);
  EXPECT_EQ(r.sampling.top_p, d.top_p);
  EXPECT_EQ(r.sampling.top_k, d.top_k);
  EXPECT_EQ(r.sampling.min_p, d.min_p);
  EXPECT_EQ(r.sampling.repeat_penalty, 1.0f);
  EXPECT_FALSE(r.sampling.has_seed);
  EXPECT_TRUE(r.sampling.stop.empty());
}

TEST(ServerApi, PromptForms) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(R"({"prompt":[1,2,3]})", false, r));
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_FALSE(parse_completion_request(R"({"prompt":["only one"]})", false, r));
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt, "only one");
  ASSERT_FALSE(parse_completion_request(R"({"prompt":""})", false, r));
  EXPECT_EQ(r.prompt, "");
  expect_bad(R"({})", false, "prompt");
  expect_bad(R"({"prompt":5})", false, "prompt");
  expect_bad(R"({"prompt":[]})", false, "prompt");
  expect_bad(R"({"prompt":["a","b"]})", false, "prompt");
  expect_bad(R"({"prompt":[1,"a"]})", false, "prompt[1]");
  expect_bad(R"({"prompt":[1,-2]})", false, "prompt[1]");
  expect_bad(R"({"prompt":[1.5]})", false, "prompt[0]");
  expect_bad(R"({"prompt":[4294967296]})", false, "prompt[0]");
  expect_bad(R"({"prompt":[{"a":1}]})", false, "prompt[0]");
}

TEST(ServerApi, MaxTokensAliases) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(completion_with(R"("n_predict":12)"), false, r));
  EXPECT_EQ(r.sampling.max_tokens, 12);
  ASSERT_FALSE(parse_completion_request(completion_with(R"("max_completion_tokens":5,"max_tokens":9)"), false, r));
  EXPECT_EQ(r.sampling.max_tokens, 5);  // the newer name wins
  ASSERT_FALSE(parse_completion_request(completion_with(R"("max_tokens":-1)"), false, r));
  EXPECT_EQ(r.sampling.max_tokens, -1);
  for (const char* name : {"max_tokens", "max_completion_tokens", "n_predict"}) {
    for (const char* v : {"0", "-2", "1.5", "\"10\"", "true", "3000000000"})
      expect_bad(completion_with("\"" + std::string(name) + "\":" + v), false, name);
  }
}

TEST(ServerApi, NumberRangesNameTheField) {
  struct Case {
    const char* field;
    std::vector<const char*> good, bad;
  };
  const std::vector<Case> cases = {
      {"temperature", {"0", "2", "0.7"}, {"-0.1", "2.01", "\"1\"", "true", "[0.5]"}},
      {"top_p", {"1", "0.01"}, {"0", "1.5", "-1", "\"x\""}},
      {"top_k", {"0", "100"}, {"-1", "1.5", "\"4\""}},
      {"min_p", {"0", "1"}, {"-0.01", "1.01"}},
      {"presence_penalty", {"-2", "2", "0"}, {"-2.5", "2.5", "[]"}},
      {"frequency_penalty", {"-2", "2"}, {"-3", "3", "{}"}},
      {"repeat_penalty", {"0.5", "1", "3"}, {"0", "-1", "\"1\""}},
  };
  for (const auto& c : cases) {
    for (const char* v : c.good) {
      CompletionRequest r;
      auto e = parse_completion_request(chat_with("\"" + std::string(c.field) + "\":" + v), true, r);
      EXPECT_FALSE(e.has_value()) << c.field << "=" << v << ": " << e->message;
    }
    for (const char* v : c.bad) expect_bad(chat_with("\"" + std::string(c.field) + "\":" + v), true, c.field);
  }
  CompletionRequest r;
  auto e = parse_completion_request(chat_with(R"("temperature":3)"), true, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "'temperature' must be a number in [0, 2]");
}

TEST(ServerApi, SeedStopNStream) {
  CompletionRequest r;
  ASSERT_FALSE(parse_completion_request(chat_with(R"("seed":-1)"), true, r));
  EXPECT_FALSE(r.sampling.has_seed);  // negative = random, like llama-server's -1
  ASSERT_FALSE(parse_completion_request(chat_with(R"("seed":18446744073709551615)"), true, r));
  EXPECT_TRUE(r.sampling.has_seed);
  EXPECT_EQ(r.sampling.seed, 18446744073709551615ull);
  ASSERT_FALSE(parse_completion_request(chat_with(R"("stop":"END")"), true, r));
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  ASSERT_FALSE(parse_completion_request(chat_with(R"("stop":["a","b","c","d"])"), true, r));
  EXPECT_EQ(r.sampling.stop.size(), 4u);
  expect_bad(chat_with(R"("seed":1.5)"), true, "seed");
  expect_bad(chat_with(R"("seed":"7")"), true, "seed");
  expect_bad(chat_with(R"("stop":"")"), true, "stop");
  expect_bad(chat_with(R"("stop":5)"), true, "stop");
  expect_bad(chat_with(R"("stop":["a","b","c","d","e"])"), true, "stop");
  expect_bad(chat_with(R"("stop":["a",""])"), true, "stop[1]");
  expect_bad(chat_with(R"("stop":["a",3])"), true, "stop[1]");
  expect_bad(chat_with(R"("n":2)"), true, "n");
  expect_bad(chat_with(R"("n":"1")"), true, "n");
  ASSERT_FALSE(parse_completion_request(chat_with(R"("n":1)"), true, r));
  expect_bad(chat_with(R"("stream":"yes")"), true, "stream");
  expect_bad(chat_with(R"("stream":1)"), true, "stream");
  expect_bad(chat_with(R"("stream_options":true)"), true, "stream_options");
  expect_bad(chat_with(R"("stream_options":{"include_usage":"y"})"), true, "stream_options.include_usage");
  expect_bad(chat_with(R"("model":7)"), true, "model");
}

TEST(ServerApi, MessagesValidation) {
  expect_bad(R"({})", true, "messages");
  expect_bad(R"({"messages":[]})", true, "messages");
  expect_bad(R"({"messages":"hi"})", true, "messages");
  expect_bad(R"({"messages":[5]})", true, "messages[0]");
  expect_bad(R"({"messages":[{"content":"x"}]})", true, "messages[0].role");
  expect_bad(R"({"messages":[{"role":1,"content":"x"}]})", true, "messages[0].role");
  expect_bad(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":5}]})", true,
             "messages[1].content");
  expect_bad(R"({"messages":[{"role":"user"}]})", true, "messages[0].content");
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})", true,
             "messages[0].content[0].type");
  expect_bad(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", true, "messages[0].content[0].text");
  expect_bad(R"({"messages":[{"role":"user","content":["x"]}]})", true, "messages[0].content[0]");
  expect_bad(R"({"messages":[{"role":"user","content":"a"},{"role":"tool","content":"r"}]})", true,
             "messages[1].role");
  expect_bad(R"({"messages":[{"role":"function","content":"r"}]})", true, "messages[0].role");
  expect_bad(R"({"messages":[{"role":"robot","content":"r"}]})", true, "messages[0].role");
  CompletionRequest r;
  auto e = parse_completion_request(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":5}]})",
                                    true, r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message, "'messages[1].content' must be a string or an array of text parts");
}

TEST(ServerApi, MalformedBodiesAndUtf8) {
  for (const char* body : {"", "{", "not json", "{\"prompt\":\"x\",}", "[1,2]", "\"text\"", "null", "42",
                           "{\"prompt\":\"x\",\"temperature\":1e400}"}) {
    CompletionRequest r;
    auto e = parse_completion_request(body, false, r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_FALSE(e->message.empty());
    EXPECT_NO_THROW(json::parse(error_json(*e)));
  }
  // Raw invalid UTF-8 inside a string: refused at parse time, never thrown later.
  CompletionRequest r;
  auto e = parse_completion_request(std::string("{\"prompt\":\"a\xFF\"}"), false, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("UTF-8"), std::string::npos) << e->message;
  EXPECT_NO_THROW(json::parse(error_json(*e)));
  // A lone surrogate escape cannot become UTF-8 either.
  EXPECT_TRUE(parse_completion_request(R"({"prompt":"\ud800"})", false, r).has_value());
  // A valid escaped character is fine.
  ASSERT_FALSE(parse_completion_request(R"({"prompt":"\u20ac"})", false, r));
  EXPECT_EQ(r.prompt, "\xE2\x82\xAC");
}

TEST(ServerApi, TokenizeAndDetokenizeRequests) {
  TokenizeRequest t;
  ASSERT_FALSE(parse_tokenize_request(R"({"content":"hello","add_special":true,"with_pieces":true})", t));
  EXPECT_EQ(t.content, "hello");
  EXPECT_TRUE(t.add_special);
  EXPECT_TRUE(t.with_pieces);
  ASSERT_FALSE(parse_tokenize_request(R"({"content":""})", t));
  EXPECT_FALSE(t.add_special);
  EXPECT_FALSE(t.with_pieces);
  auto e = parse_tokenize_request(R"({"text":"x"})", t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "content");
  e = parse_tokenize_request(R"({"content":"x","add_special":1})", t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "add_special");

  std::vector<int32_t> ids;
  ASSERT_FALSE(parse_detokenize_request(R"({"tokens":[0,5,99]})", ids, 100));
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 5, 99}));
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"tokens":[0,100]})", "tokens[1]"},
           {R"({"tokens":[-1]})", "tokens[0]"},
           {R"({"tokens":[1,2,"3"]})", "tokens[2]"},
           {R"({"tokens":[18446744073709551615]})", "tokens[0]"},
           {R"({"tokens":5})", "tokens"},
           {R"({})", "tokens"}}) {
    auto d = parse_detokenize_request(body, ids, 100);
    ASSERT_TRUE(d) << body;
    EXPECT_EQ(d->param, param) << body;
    EXPECT_NE(d->message.find("'" + param + "'"), std::string::npos) << d->message;
    EXPECT_TRUE(ids.empty());
  }
  auto d = parse_detokenize_request(R"({"tokens":[100]})", ids, 100);
  ASSERT_TRUE(d);
  EXPECT_NE(d->message.find("[0, 100)"), std::string::npos) << d->message;
}

TEST(ServerApi, ErrorJsonShape) {
  ApiError e;
  e.message = "'top_p' must be a number in (0, 1]";
  e.param = "top_p";
  json j = json::parse(error_json(e));
  EXPECT_EQ(j["error"]["message"], e.message);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "top_p");
  EXPECT_EQ(j["error"]["code"], 400);
  ApiError nf{404, "no such route", "not_found_error", ""};
  j = json::parse(error_json(nf));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], 404);
  EXPECT_EQ(j["error"]["type"], "not_found_error");
}

TEST(ServerApi, NonStreamedResponses) {
  json c = json::parse(completion_json("cmpl-1", 1700000000, "m", "Hello", "stop", 5, 2, false));
  EXPECT_EQ(c["id"], "cmpl-1");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["created"], 1700000000);
  EXPECT_EQ(c["model"], "m");
  ASSERT_EQ(c["choices"].size(), 1u);
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_EQ(c["choices"][0]["text"], "Hello");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(c["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(c["usage"]["completion_tokens"], 2);
  EXPECT_EQ(c["usage"]["total_tokens"], 7);

  json h = json::parse(completion_json("chatcmpl-9", 7, "m2", "Hi \xE2\x82", "length", 3, 4, true));
  EXPECT_EQ(h["object"], "chat.completion");
  EXPECT_EQ(h["id"], "chatcmpl-9");
  EXPECT_EQ(h["choices"][0]["index"], 0);
  EXPECT_EQ(h["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h["choices"][0]["message"]["content"], "Hi \xEF\xBF\xBD");  // a cut-off character becomes U+FFFD
  EXPECT_EQ(h["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(h["choices"][0].contains("text"));
  EXPECT_EQ(h["usage"]["total_tokens"], 7);
}

TEST(ServerApi, StreamedChunks) {
  json first = json::parse(chunk_json("c", 1, "m", "", "", true, true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  json mid = json::parse(chunk_json("c", 1, "m", "tok", "", true, false));
  EXPECT_EQ(mid["choices"][0]["delta"], (json{{"content", "tok"}}));
  EXPECT_TRUE(mid["choices"][0]["finish_reason"].is_null());
  json last = json::parse(chunk_json("c", 1, "m", "", "stop", true, false));
  EXPECT_TRUE(last["choices"][0]["delta"].is_object());
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last.contains("usage"));

  json t = json::parse(chunk_json("c", 2, "m", "abc", "", false, true));
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "abc");
  EXPECT_TRUE(t["choices"][0]["finish_reason"].is_null());
  json tl = json::parse(chunk_json("c", 2, "m", "", "length", false, false));
  EXPECT_EQ(tl["choices"][0]["text"], "");
  EXPECT_EQ(tl["choices"][0]["finish_reason"], "length");

  json u = json::parse(usage_chunk_json("c", 3, "m", 10, 4, true));
  EXPECT_EQ(u["object"], "chat.completion.chunk");
  EXPECT_TRUE(u["choices"].is_array());
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"], (json{{"prompt_tokens", 10}, {"completion_tokens", 4}, {"total_tokens", 14}}));

  EXPECT_EQ(sse("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(ServerApi, ModelsTokenizeDetokenizeJson) {
  json m = json::parse(models_json("qwen.gguf", 123, 4096, 151936, 494032768));
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "qwen.gguf");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["created"], 123);
  EXPECT_EQ(m["data"][0]["owned_by"], "turbokv");
  EXPECT_EQ(m["data"][0]["meta"]["n_ctx"], 4096);
  EXPECT_EQ(m["data"][0]["meta"]["n_vocab"], 151936);
  EXPECT_EQ(m["data"][0]["meta"]["n_params"], 494032768);

  EXPECT_EQ(json::parse(tokenize_json({1, 2}, nullptr)), json::parse(R"({"tokens":[1,2]})"));
  const std::vector<std::string> pieces = {"he", "\xE2\x82"};
  EXPECT_EQ(json::parse(tokenize_json({7, 8}, &pieces)),
            json::parse(R"({"tokens":[{"id":7,"piece":"he"},{"id":8,"piece":[226,130]}]})"));
  EXPECT_EQ(json::parse(detokenize_json("a\xFF")), json::parse(R"({"content":"a\ufffd"})"));
}

TEST(ServerApi, SamplerOptionsFromRequest) {
  SamplingRequest s;
  s.temperature = 0.3f;
  s.top_k = 5;
  s.top_p = 0.5f;
  s.min_p = 0.2f;
  s.repeat_penalty = 1.3f;
  s.presence_penalty = 0.4f;
  s.frequency_penalty = -0.6f;
  SamplerOptions o = sampler_options(s, 99);
  EXPECT_EQ(o.temperature, 0.3f);
  EXPECT_EQ(o.top_k, 5);
  EXPECT_EQ(o.top_p, 0.5f);
  EXPECT_EQ(o.min_p, 0.2f);
  EXPECT_EQ(o.repeat_penalty, 1.3f);
  EXPECT_EQ(o.presence_penalty, 0.4f);
  EXPECT_EQ(o.frequency_penalty, -0.6f);
  EXPECT_EQ(o.seed, 99u);  // no seed in the request: the server's random one
  s.has_seed = true;
  s.seed = 5;
  EXPECT_EQ(sampler_options(s, 99).seed, 5u);
}

// OpenAI's definition, computed by hand: logits {1, 2, 3, 0.5}, generated
// tokens {2, 2, 0}, presence 0.5, frequency 0.25:
//   t0: count 1 -> 1 - (0.25*1 + 0.5) = 0.25;  t2: count 2 -> 3 - (0.25*2 + 0.5) = 2.0;  t1, t3 unchanged.
TEST(ServerApi, PresenceFrequencyPenaltyMath) {
  std::vector<float> l = {1.0f, 2.0f, 3.0f, 0.5f};
  tkv::apply_presence_frequency(l.data(), 4, {2, 2, 0}, 0, 0.5f, 0.25f);
  EXPECT_EQ(l, (std::vector<float>{0.25f, 2.0f, 2.0f, 0.5f}));
  // Only history[from..] counts (the prompt is not penalised); bad ids are ignored.
  l = {1.0f, 2.0f, 3.0f, 0.5f};
  tkv::apply_presence_frequency(l.data(), 4, {1, 1, 1, 2, 2, 0, -1, 9}, 3, 0.5f, 0.25f);
  EXPECT_EQ(l, (std::vector<float>{0.25f, 2.0f, 2.0f, 0.5f}));
  // Negative penalties encourage repetition.
  l = {0.0f, 0.0f};
  tkv::apply_presence_frequency(l.data(), 2, {1, 1, 1}, 0, -1.0f, -0.5f);
  EXPECT_EQ(l, (std::vector<float>{0.0f, 2.5f}));

  // Through the sampler (greedy): token 2 wins until its presence penalty applies.
  const std::vector<float> logits = {1.0f, 2.0f, 2.5f, 0.5f};
  tkv::SamplerOptions g;
  g.temperature = 0;
  EXPECT_EQ(tkv::Sampler(g).sample(logits.data(), 4, {2}), 2);
  g.presence_penalty = 1.0f;
  EXPECT_EQ(tkv::Sampler(g).sample(logits.data(), 4, {2}), 1);
  EXPECT_EQ(tkv::Sampler(g).sample(logits.data(), 4, {2}, 1), 2);  // the 2 is prompt: not counted
  g.presence_penalty = 0;
  g.frequency_penalty = 0.2f;  // 2.5 - 0.2*2 = 2.1 still wins; a third occurrence (1.9) loses
  EXPECT_EQ(tkv::Sampler(g).sample(logits.data(), 4, {2, 2}), 2);
  EXPECT_EQ(tkv::Sampler(g).sample(logits.data(), 4, {2, 2, 2}), 1);
}

// Zero penalties must leave seeded sampling unchanged: the same draws as a
// sampler whose options never mention them, whatever history is passed.
TEST(ServerApi, ZeroPenaltiesKeepSamplingIdentical) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = float((i * 37) % 11) * 0.3f;
  tkv::SamplerOptions a;
  a.seed = 7;
  a.top_k = 0;
  a.min_p = 0;
  a.top_p = 1;
  tkv::SamplerOptions b = a;
  b.presence_penalty = 0.0f;
  b.frequency_penalty = -0.0f;
  tkv::Sampler sa(a), sb(b);
  std::vector<int32_t> hist;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = sa.sample(logits.data(), 50, hist);
    EXPECT_EQ(x, sb.sample(logits.data(), 50, hist, hist.size() / 2));
    hist.push_back(x);
  }
}

}  // namespace
}  // namespace tkv::server
