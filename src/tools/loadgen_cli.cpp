// `turbokv loadgen --url http://127.0.0.1:PORT [--clients 64] [--requests 100]
// [--max-tokens 16] [--stream-fraction 0.5] [--chat-fraction 0.5] [--api-key KEY]
// [--seed S] [--json-out FILE]`: a load generator for `turbokv serve` (or any
// OpenAI-compatible server). Each client thread sends its requests one after
// another, a seeded mix of /v1/completions and /v1/chat/completions, streamed
// and not, and checks every response completely (status, JSON shape, choices,
// finish_reason, usage; for streams every SSE event, the [DONE] terminator and
// the closing chunk). Prints throughput and latency; exits 1 on any error.
// Generated tokens are summed from usage; a stream sent without
// stream_options.include_usage (half of them) counts its text chunks instead,
// a lower bound (a chunk holds one token or more).
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tools/common_flags.h"
#include "tools/subcommands.h"

namespace tkv {
namespace {

using json = nlohmann::json;

struct LoadOpt {
  std::string url, api_key, json_out;
  int clients = 64, requests = 100, max_tokens = 16, timeout = 600;
  double stream_fraction = 0.5, chat_fraction = 0.5;
  uint64_t seed = 1;
};

// One planned request: what was asked, so that the answer can be checked.
struct Plan {
  bool chat = false, stream = false, include_usage = false;
  int max_tokens = 16;
  std::string body;
};

struct Outcome {
  std::string error;  // empty: valid
  int completion_tokens = 0;
};

const char* const kWords[] = {"the", "cat", "sat", "on", "a", "mat", "once", "upon", "time", "there", "was",
                              "little", "girl", "who", "lived", "in", "small", "house", "near", "forest",
                              "and", "dog", "ran", "to", "park", "sun", "shone", "bright", "happy", "day"};

std::string random_text(std::mt19937_64& rng, int min_words, int max_words) {
  const int n = std::uniform_int_distribution<int>(min_words, max_words)(rng);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kWords[std::uniform_int_distribution<size_t>(0, std::size(kWords) - 1)(rng)];
  }
  return s;
}

Plan make_plan(std::mt19937_64& rng, const LoadOpt& o) {
  std::uniform_real_distribution<double> u(0, 1);
  Plan p;
  p.chat = u(rng) < o.chat_fraction;
  p.stream = u(rng) < o.stream_fraction;
  p.include_usage = p.stream && u(rng) < 0.5;
  p.max_tokens = o.max_tokens;
  json j = {{"max_tokens", p.max_tokens}, {"temperature", u(rng) < 0.5 ? 0.0 : 0.8},
            {"seed", std::uniform_int_distribution<int>(0, 1 << 30)(rng)}};
  if (p.chat) {
    json msgs = json::array();
    if (u(rng) < 0.5) msgs.push_back({{"role", "system"}, {"content", "You are " + random_text(rng, 1, 4) + "."}});
    msgs.push_back({{"role", "user"}, {"content", random_text(rng, 2, 12)}});
    j["messages"] = msgs;
  } else {
    j["prompt"] = random_text(rng, 1, 12);
  }
  if (p.stream) {
    j["stream"] = true;
    if (p.include_usage) j["stream_options"] = {{"include_usage", true}};
  }
  p.body = j.dump();
  return p;
}

bool is_reason(const json& r) { return r.is_string() && (r == "stop" || r == "length"); }

// "": usage is well-formed and consistent with the request; else why not.
std::string check_usage(const json& j, int max_tokens, int* completion) {
  if (!j.contains("usage") || !j["usage"].is_object()) return "no usage object";
  const json& u = j["usage"];
  for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"})
    if (!u.contains(k) || !u[k].is_number_integer()) return std::string("usage.") + k + " is not an integer";
  const int64_t p = u["prompt_tokens"], c = u["completion_tokens"], t = u["total_tokens"];
  if (p < 1) return "usage.prompt_tokens " + std::to_string(p) + " < 1";
  if (c < 0 || c > max_tokens) return "usage.completion_tokens " + std::to_string(c) + " not in [0, max_tokens]";
  if (t != p + c) return "usage.total_tokens != prompt_tokens + completion_tokens";
  *completion = static_cast<int>(c);
  return "";
}

std::string check_common(const json& j, const char* object) {
  if (!j.is_object()) return "response is not a JSON object";
  if (!j.contains("object") || j["object"] != object) return std::string("object is not \"") + object + "\"";
  if (!j.contains("id") || !j["id"].is_string() || j["id"].get<std::string>().empty()) return "no id";
  if (!j.contains("created") || !j["created"].is_number_integer()) return "no integer created";
  if (!j.contains("model") || !j["model"].is_string()) return "no model";
  if (!j.contains("choices") || !j["choices"].is_array()) return "no choices array";
  return "";
}

Outcome check_plain(const Plan& p, const std::string& body) {
  Outcome r;
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return {"body is not JSON"};
  if (std::string e = check_common(j, p.chat ? "chat.completion" : "text_completion"); !e.empty()) return {e};
  if (j["choices"].size() != 1) return {"choices has " + std::to_string(j["choices"].size()) + " entries, not 1"};
  const json& c = j["choices"][0];
  if (!c.is_object() || c.value("index", -1) != 0) return {"choices[0].index is not 0"};
  if (p.chat) {
    if (!c.contains("message") || !c["message"].is_object()) return {"no choices[0].message"};
    if (c["message"].value("role", "") != "assistant") return {"message.role is not assistant"};
    if (!c["message"].contains("content") || !c["message"]["content"].is_string()) return {"message.content is not a string"};
  } else if (!c.contains("text") || !c["text"].is_string()) {
    return {"choices[0].text is not a string"};
  }
  if (!c.contains("finish_reason") || !is_reason(c["finish_reason"])) return {"finish_reason not stop/length"};
  if (std::string e = check_usage(j, p.max_tokens, &r.completion_tokens); !e.empty()) return {e};
  if (c["finish_reason"] == "length" && r.completion_tokens != p.max_tokens)
    return {"finish_reason length with completion_tokens != max_tokens"};
  return r;
}

Outcome check_stream(const Plan& p, const std::string& body) {
  Outcome r;
  const char* object = p.chat ? "chat.completion.chunk" : "text_completion";
  std::vector<std::string> events;
  for (size_t pos = 0; pos < body.size();) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return {"stream ends inside an event (no blank line)"};
    events.push_back(body.substr(pos, end - pos));
    pos = end + 2;
  }
  if (events.empty() || events.back() != "data: [DONE]") return {"stream does not end with data: [DONE]"};
  events.pop_back();
  std::string id, reason, text;
  int content_chunks = 0, usage_chunks = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const std::string at = "event " + std::to_string(i) + ": ";
    if (events[i].rfind("data: ", 0) != 0) return {at + "not a data: line"};
    json j = json::parse(events[i].substr(6), nullptr, false);
    if (j.is_discarded()) return {at + "data is not JSON"};
    if (j.is_object() && j.contains("error")) return {at + "error event: " + j["error"].dump()};
    if (std::string e = check_common(j, object); !e.empty()) return {at + e};
    if (id.empty()) id = j["id"];
    if (j["id"] != id) return {at + "id changes within the stream"};
    if (j["choices"].empty()) {  // the usage chunk: after the closing one
      if (!p.include_usage || reason.empty() || usage_chunks++) return {at + "unexpected chunk without choices"};
      if (std::string e = check_usage(j, p.max_tokens, &r.completion_tokens); !e.empty()) return {at + e};
      continue;
    }
    if (!reason.empty()) return {at + "chunk after the one with finish_reason"};
    if (j["choices"].size() != 1) return {at + "choices has more than one entry"};
    const json& c = j["choices"][0];
    if (!c.is_object() || c.value("index", -1) != 0) return {at + "choices[0].index is not 0"};
    if (p.chat) {
      if (!c.contains("delta") || !c["delta"].is_object()) return {at + "no delta object"};
      const json& d = c["delta"];
      if (i == 0 && d.value("role", "") != "assistant") return {at + "first delta has no role assistant"};
      if (d.contains("content")) {
        if (!d["content"].is_string()) return {at + "delta.content is not a string"};
        text += d["content"].get<std::string>();
        content_chunks += !d["content"].get<std::string>().empty();
      }
    } else {
      if (!c.contains("text") || !c["text"].is_string()) return {at + "choices[0].text is not a string"};
      text += c["text"].get<std::string>();
      content_chunks += !c["text"].get<std::string>().empty();
    }
    if (!c.contains("finish_reason")) return {at + "no finish_reason field"};
    if (!c["finish_reason"].is_null()) {
      if (!is_reason(c["finish_reason"])) return {at + "finish_reason not stop/length/null"};
      reason = c["finish_reason"];
    }
  }
  if (reason.empty()) return {"no chunk with a finish_reason"};
  if (p.include_usage && usage_chunks != 1) return {"include_usage set but no usage chunk"};
  if (!p.include_usage && usage_chunks) return {"usage chunk without include_usage"};
  if (!p.include_usage) r.completion_tokens = content_chunks;
  // Each non-empty piece holds at least one token; "length" means all of them were generated.
  if (content_chunks > (p.include_usage ? r.completion_tokens : p.max_tokens))
    return {std::to_string(content_chunks) + " text chunks for " + std::to_string(r.completion_tokens) + " tokens"};
  if (p.include_usage && reason == "length" && r.completion_tokens != p.max_tokens)
    return {"finish_reason length with completion_tokens != max_tokens"};
  if (content_chunks > 0 && text.empty()) return {"chunks do not concatenate to text"};
  return r;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * double(v.size() - 1) + 0.5));
  return v[i];
}

void run_loadgen(const LoadOpt& o) {
  auto fail = [](const std::string& m) { fail_command("loadgen", m); };
  if (o.url.rfind("http://", 0) != 0) fail("--url must start with http:// (e.g. http://127.0.0.1:8080)");
  if (o.clients < 1 || o.clients > 4096) fail("--clients must be in 1..4096");
  if (o.requests < 1) fail("--requests must be >= 1");
  if (o.max_tokens < 1) fail("--max-tokens must be >= 1");
  if (o.timeout < 1) fail("--timeout must be >= 1 (seconds)");
  if (!(o.stream_fraction >= 0 && o.stream_fraction <= 1)) fail("--stream-fraction must be in [0, 1]");
  if (!(o.chat_fraction >= 0 && o.chat_fraction <= 1)) fail("--chat-fraction must be in [0, 1]");
  {
    httplib::Client probe(o.url);
    if (!probe.is_valid()) fail("--url " + o.url + " is not a usable URL");
    probe.set_connection_timeout(5, 0);
    auto res = probe.Get("/health");
    if (!res) fail("cannot reach " + o.url + "/health (" + httplib::to_string(res.error()) + " error): is the server running?");
  }
  std::mutex mu;
  std::vector<double> latencies;
  std::atomic<int64_t> errors{0}, tokens{0};
  std::vector<std::string> first_errors;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int ci = 0; ci < o.clients; ++ci) {
    threads.emplace_back([&, ci] {
      std::mt19937_64 rng(o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(ci));
      httplib::Client cli(o.url);
      cli.set_connection_timeout(10, 0);
      cli.set_read_timeout(o.timeout, 0);
      cli.set_write_timeout(o.timeout, 0);
      cli.set_keep_alive(true);
      if (!o.api_key.empty()) cli.set_bearer_token_auth(o.api_key.c_str());
      std::vector<double> lat;
      for (int ri = 0; ri < o.requests; ++ri) {
        const Plan p = make_plan(rng, o);
        const char* path = p.chat ? "/v1/chat/completions" : "/v1/completions";
        const auto s = std::chrono::steady_clock::now();
        auto res = cli.Post(path, p.body, "application/json");
        lat.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
        Outcome out;
        if (!res) out.error = "transport: " + httplib::to_string(res.error());
        else if (res->status != 200) out.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200);
        else if (p.stream && res->get_header_value("Content-Type").rfind("text/event-stream", 0) != 0)
          out.error = "stream with Content-Type " + res->get_header_value("Content-Type");
        else out = p.stream ? check_stream(p, res->body) : check_plain(p, res->body);
        if (out.error.empty()) {
          tokens += out.completion_tokens;
          continue;
        }
        ++errors;
        std::lock_guard<std::mutex> lk(mu);
        if (first_errors.size() < 5)
          first_errors.push_back("client " + std::to_string(ci) + " request " + std::to_string(ri) + " POST " + path +
                                 (p.stream ? " (stream)" : "") + ": " + out.error + "\n    body: " + p.body);
      }
      std::lock_guard<std::mutex> lk(mu);
      latencies.insert(latencies.end(), lat.begin(), lat.end());
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& e : first_errors) std::fprintf(stderr, "loadgen: error: %s\n", e.c_str());
  const int64_t n = int64_t(o.clients) * o.requests;
  const double p50 = percentile(latencies, 0.5), p95 = percentile(latencies, 0.95), mx = percentile(latencies, 1.0);
  std::printf("requests: %lld, errors: %lld, wall: %.2f s, %.2f requests/s, %lld tokens generated, %.1f tokens/s\n",
              static_cast<long long>(n), static_cast<long long>(errors.load()), wall, n / wall,
              static_cast<long long>(tokens.load()), tokens.load() / wall);
  std::printf("latency: p50 %.1f ms, p95 %.1f ms, max %.1f ms\n", p50 * 1e3, p95 * 1e3, mx * 1e3);
  std::fflush(stdout);
  if (!o.json_out.empty()) {
    json j = {{"bench", "loadgen"}, {"url", o.url}, {"clients", o.clients}, {"requests_per_client", o.requests},
              {"requests", n}, {"errors", errors.load()}, {"wall_s", wall}, {"requests_per_s", n / wall},
              {"tokens", tokens.load()}, {"tokens_per_s", tokens.load() / wall}, {"latency_p50_s", p50},
              {"latency_p95_s", p95}, {"latency_max_s", mx}, {"command", command_line()}};
    std::ofstream out(o.json_out, std::ios::app);
    out << j.dump() << "\n";
    if (!out) fail("cannot write --json-out " + o.json_out);
  }
  if (errors > 0) fail(std::to_string(errors.load()) + " of " + std::to_string(n) + " requests failed");
}

}  // namespace

void register_loadgen(CLI::App& app) {
  auto o = std::make_shared<LoadOpt>();
  CLI::App* cmd = app.add_subcommand("loadgen", "Load-test an OpenAI-compatible server, checking every response");
  cmd->add_option("--url", o->url, "server, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--clients", o->clients, "client threads (default 64)");
  cmd->add_option("--requests", o->requests, "requests per client, one after another (default 100)");
  cmd->add_option("--max-tokens", o->max_tokens, "max_tokens of each request (default 16)");
  cmd->add_option("--stream-fraction", o->stream_fraction, "share of streamed requests (default 0.5)");
  cmd->add_option("--chat-fraction", o->chat_fraction, "share of chat requests (default 0.5)");
  cmd->add_option("--api-key", o->api_key, "sent as 'Authorization: Bearer KEY'");
  cmd->add_option("--seed", o->seed, "seed of the prompts and request mix (default 1)");
  cmd->add_option("--timeout", o->timeout, "seconds to wait for one response (default 600)");
  add_json_out_flag(cmd, o->json_out);
  cmd->callback([o] { run_loadgen(*o); });
}

}  // namespace tkv
