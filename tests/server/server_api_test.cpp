// The engine-independent layer of `turbokv serve`: request validation and
// response shapes (ServerApi), chat templates (ChatTemplate), and streaming
// text with stop strings and split UTF-8 (TextStream); plus the sampler's
// presence/frequency penalties that the API exposes.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "text/chat_template.h"
#include "server/openai_api.h"
#include "text/text_stream.h"

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

// "name":value, built by appending (GCC 12 warns falsely on chained + here).
std::string member(const char* name, const char* value) {
  std::string m = "\"";
  m.append(name).append("\":").append(value);
  return m;
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
      expect_bad(completion_with(member(name, v)), false, name);
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
      auto e = parse_completion_request(chat_with(member(c.field, v)), true, r);
      EXPECT_FALSE(e.has_value()) << c.field << "=" << v << ": " << e->message;
    }
    for (const char* v : c.bad) expect_bad(chat_with(member(c.field, v)), true, c.field);
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
  // Raw invalid UTF-8 inside a string: refused at parse time naming the field,
  // never thrown later when a response is dumped.
  CompletionRequest r;
  expect_bad(std::string("{\"prompt\":\"a\xFF\"}"), false, "prompt");
  expect_bad(std::string("{\"model\":\"m\",\"stop\":[\"a\",\"\xC3(\"]}"), false, "stop[1]");
  expect_bad(std::string(R"({"messages":[{"role":"user","content":"ok"},{"role":"user","content":[)"
                         R"({"type":"text","text":"x"},{"type":"text","text":")" "\xE2\x82" R"("}]}]})"),
             true, "messages[1].content[1].text");
  auto e = parse_completion_request(std::string("{\"prompt\":\"a\xFF\"}"), false, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "'prompt' must be valid UTF-8");
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


// ------------------------------------------------------------- ChatTemplate

const std::vector<ChatMessage> kConversation = {
    {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};

ChatTemplate named(const std::string& n) {
  auto t = chat_template_named(n);
  EXPECT_TRUE(t.ok()) << n;
  return *t;
}

TEST(ChatTemplate, NamedTemplates) {
  const std::vector<std::pair<std::string, ChatFormat>> all = {
      {"chatml", ChatFormat::kChatML}, {"llama3", ChatFormat::kLlama3}, {"llama2", ChatFormat::kLlama2},
      {"mistral", ChatFormat::kMistral}, {"gemma", ChatFormat::kGemma}, {"phi3", ChatFormat::kPhi3},
      {"zephyr", ChatFormat::kZephyr}, {"harmony", ChatFormat::kHarmony}};
  for (const auto& [n, f] : all) {
    auto t = chat_template_named(n);
    ASSERT_TRUE(t.ok()) << n;
    EXPECT_EQ(t->format, f);
    EXPECT_EQ(t->name, n);
    EXPECT_FALSE(t->fallback);
  }
  auto bad = chat_template_named("vicuna");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("vicuna"), std::string::npos);
  for (const auto& [n, f] : all) EXPECT_NE(bad.error().find(n), std::string::npos) << bad.error();
}

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(render_chat(named("chatml"), kConversation, "<s>", "</s>"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(named("chatml"), {{"system", "S"}, {"user", "U"}}, "", ""),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(named("chatml"), {{"user", " U "}}, "", "", false), "<|im_start|>user\n U <|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat(named("llama3"), kConversation, "<|begin_of_text|>", "<|end_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // The template trims each message's content.
  EXPECT_EQ(render_chat(named("llama3"), {{"user", "\n hi \n"}}, "<B>", "", false),
            "<B><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(ChatTemplate, Llama2FoldsSystemIntoFirstInst) {
  EXPECT_EQ(render_chat(named("llama2"), kConversation, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
  EXPECT_EQ(render_chat(named("llama2"), {{"user", " U "}}, "<s>", "</s>"), "<s>[INST] U [/INST]");
}

// Mistral AI's "v1" template (Mistral 7B Instruct v0.1/v0.2 as published).
TEST(ChatTemplate, MistralV1) {
  EXPECT_EQ(render_chat(named("mistral"), {{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}, "<s>", "</s>"),
            "<s> [INST] U1 [/INST] A1</s> [INST] U2 [/INST]");
  // A system message leads the first user turn.
  EXPECT_EQ(render_chat(named("mistral"), kConversation, "<s>", "</s>"),
            "<s> [INST] S\n\nU1 [/INST] A1</s> [INST] U2 [/INST]");
}

TEST(ChatTemplate, GemmaPrependsSystemToFirstUserTurn) {
  EXPECT_EQ(render_chat(named("gemma"), kConversation, "<bos>", "<eos>"),
            "<bos><start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
            "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(render_chat(named("gemma"), {{"user", " hi "}}, "<bos>", "<eos>", false),
            "<bos><start_of_turn>user\nhi<end_of_turn>\n");
}

TEST(ChatTemplate, Phi3) {
  EXPECT_EQ(render_chat(named("phi3"), kConversation, "<s>", "<|endoftext|>"),
            "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2<|end|>\n"
            "<|assistant|>\n");
  // Without a generation prompt the template closes with EOS.
  EXPECT_EQ(render_chat(named("phi3"), {{"user", "U"}}, "<s>", "<|endoftext|>", false),
            "<|user|>\nU<|end|>\n<|endoftext|>");
}

TEST(ChatTemplate, Zephyr) {
  EXPECT_EQ(render_chat(named("zephyr"), kConversation, "<s>", "</s>"),
            "<|system|>\nS</s>\n<|user|>\nU1</s>\n<|assistant|>\nA1</s>\n<|user|>\nU2</s>\n<|assistant|>\n");
}

// gpt-oss's harmony format, as OpenAI's gpt-oss template renders a
// conversation without tools: its own system message (with the date), the
// first system message as the developer's "# Instructions", earlier
// assistant turns on the final channel, "<|start|>assistant" to generate.
TEST(ChatTemplate, HarmonyAsGptOssRendersIt) {
  ChatTemplate t = named("harmony");
  t.date = "2026-12-02";
  const std::string sys =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-02\n\nReasoning: medium\n\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>";
  EXPECT_EQ(render_chat(t, kConversation, "<|startoftext|>", "<|return|>"),
            sys + "<|start|>developer<|message|># Instructions\n\nS\n\n<|end|>"
                  "<|start|>user<|message|>U1<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>A1<|end|>"
                  "<|start|>user<|message|>U2<|end|><|start|>assistant");
  // No system message: no developer message; content is not trimmed.
  EXPECT_EQ(render_chat(t, {{"user", " hi "}}, "", ""), sys + "<|start|>user<|message|> hi <|end|><|start|>assistant");
  // A "developer" first message is the same; an empty one writes nothing; a
  // later system message is dropped, as the template drops it.
  EXPECT_EQ(render_chat(t, {{"developer", "D"}, {"user", "U"}, {"system", "late"}}, "", ""),
            sys + "<|start|>developer<|message|># Instructions\n\nD\n\n<|end|><|start|>user<|message|>U<|end|>"
                  "<|start|>assistant");
  EXPECT_EQ(render_chat(t, {{"system", ""}, {"user", "U"}}, "", ""),
            sys + "<|start|>user<|message|>U<|end|><|start|>assistant");
  // Without a generation prompt a last assistant turn ends with <|return|>.
  EXPECT_EQ(render_chat(t, {{"user", "U"}, {"assistant", "A"}}, "", "", false),
            sys + "<|start|>user<|message|>U<|end|><|start|>assistant<|channel|>final<|message|>A<|return|>");
  // Today's date when none is set.
  char today[16];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(today, sizeof(today), "%Y-%m-%d", &tm);
  EXPECT_NE(render_chat(named("harmony"), {{"user", "U"}}, "", "").find(std::string("Current date: ") + today),
            std::string::npos);
}

// The generated tokens of a harmony reply, ids standing for the specials.
constexpr int32_t kStart = 1, kEnd = 2, kMessage = 3, kChannel = 4, kReturn = 5, kCall = 6, kConstrain = 7;
struct HTok {
  int32_t id;
  std::string text;
};
std::string harmony_shown(const std::vector<HTok>& toks) {
  HarmonyFilter f({kStart, kEnd, kMessage, kChannel, kReturn, kCall, kConstrain});
  std::string out;
  for (const HTok& t : toks) out += f.push(t.id, t.text);
  return out;
}
HTok hw(const std::string& s) { return {100, s}; }
HTok hs(int32_t id) { return {id, "<special>"}; }

TEST(ChatTemplate, HarmonyFilterShowsTheFinalChannelOnly) {
  // analysis, then the final answer: only the answer.
  EXPECT_EQ(harmony_shown({hs(kChannel), hw("analysis"), hs(kMessage), hw("Let me"), hw(" think."), hs(kEnd),
                           hs(kStart), hw("assistant"), hs(kChannel), hw("final"), hs(kMessage), hw("The answer"),
                           hw(" is 4."), hs(kReturn)}),
            "The answer is 4.");
  // The channel name split over tokens, a commentary (tool) message with a
  // constraint, then final; a header " to=" before the channel.
  EXPECT_EQ(harmony_shown({hs(kChannel), hw("ana"), hw("lysis"), hs(kMessage), hw("x"), hs(kEnd), hs(kStart),
                           hw("assistant"), hw(" to=functions.f"), hs(kChannel), hw("commentary "), hs(kConstrain),
                           hw("json"), hs(kMessage), hw("{}"), hs(kEnd), hs(kStart), hw("assistant"), hs(kChannel),
                           hw("fin"), hw("al"), hs(kMessage), hw("A"), hw("B")}),
            "AB");
  // Only analysis (cut by max_tokens): nothing shown.
  EXPECT_EQ(harmony_shown({hs(kChannel), hw("analysis"), hs(kMessage), hw("thinking")}), "");
  // A channel named "finalize" is not final.
  EXPECT_EQ(harmony_shown({hs(kChannel), hw("finalize"), hs(kMessage), hw("no")}), "");
  // Text where the header belongs (a model ignoring the format) is shown;
  // so is a message whose header names no channel.
  EXPECT_EQ(harmony_shown({hw("plain"), hw(" text")}), "plain text");
  EXPECT_EQ(harmony_shown({hs(kMessage), hw("m")}), "m");
  // Text between messages (after <|end|>, before <|start|>) is not.
  EXPECT_EQ(harmony_shown({hs(kChannel), hw("final"), hs(kMessage), hw("a"), hs(kEnd), hw("junk"), hs(kStart),
                           hw("assistant"), hs(kChannel), hw("final"), hs(kMessage), hw("b")}),
            "ab");
  EXPECT_EQ(harmony_channel(" commentary to=functions.x <|constrain|>json"), "commentary");
  EXPECT_EQ(harmony_channel("final"), "final");
  EXPECT_EQ(harmony_channel("final<|constrain|>"), "final");
  EXPECT_EQ(harmony_channel("  "), "");
}

TEST(ChatTemplate, BosOnlyWhereTheTemplateWritesIt) {
  for (const auto& n : chat_template_names()) {
    const ChatTemplate t = named(n);
    const std::string out = render_chat(t, {{"user", "x"}}, "<BOS>", "<EOS>");
    EXPECT_EQ(out.rfind("<BOS>", 0) == 0, template_writes_bos(t)) << n << ": " << out;
  }
}

TEST(ChatTemplate, EndOfTurnTexts) {
  EXPECT_EQ(end_of_turn_texts(named("chatml")), std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(end_of_turn_texts(named("llama3")), std::vector<std::string>{"<|eot_id|>"});
  EXPECT_EQ(end_of_turn_texts(named("gemma")), std::vector<std::string>{"<end_of_turn>"});
  EXPECT_EQ(end_of_turn_texts(named("phi3")), std::vector<std::string>{"<|end|>"});
  EXPECT_EQ(end_of_turn_texts(named("harmony")), (std::vector<std::string>{"<|return|>", "<|call|>"}));
  for (const char* n : {"llama2", "mistral", "zephyr"})
    EXPECT_EQ(end_of_turn_texts(named(n)), std::vector<std::string>{"</s>"}) << n;
  // Each family's end-of-turn text is what its render closes a turn with.
  for (const auto& n : chat_template_names()) {
    const auto eot = end_of_turn_texts(named(n));
    const std::string out = render_chat(named(n), {{"user", "u"}, {"assistant", "ZZ"}}, "<s>", "</s>", false);
    const size_t reply = out.find("ZZ");
    ASSERT_NE(reply, std::string::npos) << n;
    EXPECT_NE(out.find(eot[0], reply), std::string::npos) << n << ": " << out;
  }
}

TEST(ChatTemplate, DetectsFamiliesFromTemplateText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n'}}"
       "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
       "chatml"},
      {"{%- if not messages[0].role == 'system' %}{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant."
       "<|im_end|>\\n' }}{%- endif %}",
       "chatml"},
      {"{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
       "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}",
       "llama3"},
      {"{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] + "
       "'\\n<</SYS>>\\n\\n' %}{% endif %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
       "llama2"},
      {"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
       "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
       "mistral"},
      {"{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
       "+ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
       "gemma"},
      {"{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + "
       "'<|end|>\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}"
       "{{ eos_token }}{% endif %}",
       "phi3"},
      {"{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
       "eos_token }}\n{% endif %}\n{% endfor %}",
       "zephyr"},
      {"<|user|>\n{{ content }}</s>", "zephyr"},
      // gpt-oss's: <|start|> and <|channel|> (it also writes <|end|>, Phi-3's marker).
      {"{{- \"<|start|>system<|message|>\" }}{%- for message in loop_messages -%}{{- \"<|start|>assistant"
       "<|channel|>final<|message|>\" + message.content + \"<|end|>\" }}{%- endfor -%}",
       "harmony"},
  };
  for (const auto& [jinja, want] : cases) {
    const ChatTemplate t = detect_chat_template(jinja);
    EXPECT_EQ(t.name, want) << jinja;
    EXPECT_FALSE(t.fallback) << jinja;
    EXPECT_TRUE(t.note.empty());
    EXPECT_EQ(t.name, named(want).name);
    EXPECT_EQ(t.format, named(want).format);
  }
  for (const std::string& unknown : {std::string(), std::string("{{ messages[0]['content'] }}"),
                                    std::string("### Instruction:\n{{ prompt }}\n### Response:")}) {
    const ChatTemplate t = detect_chat_template(unknown);
    EXPECT_EQ(t.format, ChatFormat::kChatML);
    EXPECT_EQ(t.name, "chatml");
    EXPECT_TRUE(t.fallback);
    EXPECT_NE(t.note.find("ChatML"), std::string::npos) << t.note;
  }
  EXPECT_NE(detect_chat_template("{{ x }}").note.find("not recognised"), std::string::npos);
  // A gpt-oss file without a template gets harmony; other architectures and
  // an unrecognised template on gpt-oss still fall back to ChatML.
  EXPECT_EQ(detect_chat_template("", "gpt-oss").format, ChatFormat::kHarmony);
  EXPECT_FALSE(detect_chat_template("", "gpt-oss").fallback);
  EXPECT_TRUE(detect_chat_template("", "llama").fallback);
  EXPECT_TRUE(detect_chat_template("{{ x }}", "gpt-oss").fallback);
}

TEST(ChatTemplate, ValidateRoles) {
  EXPECT_TRUE(validate_chat(kConversation).ok());
  EXPECT_FALSE(validate_chat({}).ok());
  Status s = validate_chat({{"user", "a"}, {"assistant", "b"}, {"tool", "c"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'messages[2].role'"), std::string::npos) << s.message();
  // harmony takes a developer message first, nowhere else; the others never.
  EXPECT_TRUE(validate_chat(named("harmony"), {{"developer", "d"}, {"user", "u"}}).ok());
  s = validate_chat(named("harmony"), {{"user", "u"}, {"developer", "d"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'messages[1].role'"), std::string::npos) << s.message();
  EXPECT_FALSE(validate_chat(named("chatml"), {{"developer", "d"}, {"user", "u"}}).ok());
}

// --------------------------------------------------------------- TextStream

// Streams pieces (then finish) and returns everything sent.
std::string stream_all(TextStream& ts, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    const std::string got = ts.push(p);
    EXPECT_TRUE(utf8_valid(got)) << "sent bytes that are not UTF-8";
    out += got;
  }
  return out + ts.finish();
}

TEST(TextStream, PassesTextThroughWithoutStops) {
  TextStream ts({});
  EXPECT_EQ(ts.push("Hello"), "Hello");
  EXPECT_EQ(ts.push(", world"), ", world");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.finish(), "");
}

TEST(TextStream, StopStringSplitAcrossPieces) {
  TextStream ts({"</answer>"});
  EXPECT_EQ(ts.push("The result is 4"), "The result is 4");
  EXPECT_EQ(ts.push(".</an"), ".");  // "</an" may start the stop: held back
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.push("swer> and more"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.push("ignored"), "");
  EXPECT_EQ(ts.finish(), "");
}

TEST(TextStream, HeldTailReleasedWhenItStopsMatching) {
  TextStream ts({"STOP"});
  EXPECT_EQ(ts.push("go ST"), "go ");
  EXPECT_EQ(ts.push("A"), "STA");
  EXPECT_EQ(ts.push("S"), "");
  EXPECT_EQ(ts.finish(), "S");  // never completed: sent at the end
  EXPECT_FALSE(ts.stopped());
}

TEST(TextStream, EarliestOfSeveralStops) {
  TextStream ts({"world", "lo"});
  EXPECT_EQ(stream_all(ts, {"hel", "lo world"}), "hel");
  EXPECT_TRUE(ts.stopped());
  TextStream t2({"bc", "abcd"});
  EXPECT_EQ(stream_all(t2, {"xa", "b", "cd"}), "x");  // "abcd" starts before "bc"
}

TEST(TextStream, Utf8SplitAcrossPieces) {
  TextStream ts({});
  EXPECT_EQ(ts.push("a\xE2"), "a");  // € = E2 82 AC
  EXPECT_EQ(ts.push("\x82"), "");
  EXPECT_EQ(ts.push("\xAC" "b\xF0\x9F"), "\xE2\x82\xAC" "b");
  EXPECT_EQ(ts.push("\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ts.finish(), "");
  TextStream cut({});
  EXPECT_EQ(cut.push("x\xE2\x82"), "x");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");  // generation ended mid-character
}

TEST(TextStream, StopStringWithMultibyteCharacters) {
  TextStream ts({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(stream_all(ts, {"l'\xC3", "\xA9t", "\xC3", "\xA9 chaud"}), "l'");
  EXPECT_TRUE(ts.stopped());
}

TEST(TextStream, Utf8Sanitize) {
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_sanitize("plain \xC3\xA9"), "plain \xC3\xA9");
  EXPECT_EQ(utf8_sanitize("\xE2\x82" "a"), R + "a");       // truncated sequence: one U+FFFD
  EXPECT_EQ(utf8_sanitize("\xC0\xAF"), R + R);              // overlong lead, lone continuation
  EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), R + R + R);      // a surrogate is not UTF-8
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), R + R + R + R);  // above U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xFF"), R);
  EXPECT_TRUE(utf8_valid("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8_valid("\xF0\x9F\x98"));
  EXPECT_FALSE(utf8_valid("\xE0\x80\x80"));
  EXPECT_EQ(utf8_incomplete_tail("ab\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2\x82\xAC"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xE0\x80"), 0u);  // can never become valid
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
}

// Any split of a text into pieces streams to the non-streamed result: the
// text cut at the first stop, with ill-formed bytes as U+FFFD.
RC_GTEST_PROP(TextStream, AnySplitStreamsLikeTheWhole, ()) {
  static const std::vector<std::string> frags = {"a", "b", " ", "ab", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                                 "\xE2", "\x82", "\xFF", "</s", ">", "<"};
  static const std::vector<std::vector<std::string>> stop_sets = {
      {}, {"ab"}, {"</s>"}, {"b\xE2\x82\xAC"}, {"\xC3\xA9 ", "bb", "</s>"}, {"a a"}};
  const auto idx = *rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, frags.size()));
  std::string text;
  for (size_t i : idx) text += frags[i];
  const auto& stops = stop_sets[*rc::gen::inRange<size_t>(0, stop_sets.size())];
  // Random cut points split the bytes anywhere, even inside a character.
  auto cuts = *rc::gen::container<std::vector<size_t>>(rc::gen::inRange<size_t>(0, text.size() + 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::string> pieces;
  size_t prev = 0;
  for (size_t c : cuts) {
    pieces.push_back(text.substr(prev, c - prev));
    prev = c;
  }
  pieces.push_back(text.substr(prev));

  size_t at = std::string::npos;
  for (const auto& s : stops) at = std::min(at, text.find(s));
  const std::string want = utf8_sanitize(text.substr(0, at));
  RC_CLASSIFY(at != std::string::npos, "stopped");
  RC_CLASSIFY(!utf8_valid(text), "ill-formed UTF-8");

  TextStream ts(stops);
  std::string got;
  for (const auto& p : pieces) {
    const std::string out = ts.push(p);
    RC_ASSERT(utf8_valid(out));
    got += out;
  }
  got += ts.finish();
  RC_ASSERT(got == want);
  RC_ASSERT(ts.stopped() == (at != std::string::npos));
}

}  // namespace
}  // namespace tkv::server
