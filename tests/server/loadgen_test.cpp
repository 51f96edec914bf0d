// The short version of scripts/load-test.sh: `turbokv serve` on the reference
// model as a child process, `turbokv loadgen` (8 clients x 5 requests, every
// response checked) against it, /metrics back at rest afterwards, and a clean
// exit on SIGTERM.
#include <httplib.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf_edit.h"
#include "model/gen_model.h"
#include "model/model.h"
#include "model/tokenizer_gguf.h"
#include "test_cli.h"
#include "text/chat_template.h"
#include "shared_data.h"

extern char** environ;

namespace tkv {
namespace {

const std::string kModel = std::string(TKV_SHARED_DIR) + "/models/ref-5m/ref-5m-f32.gguf";

// A metric's value from Prometheus text ("name value" lines); -1 if absent.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

class LoadgenTest : public Cli {
 protected:
  void TearDown() override {
    if (pid_ > 0) {  // a failed test: do not leave the server running
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    Cli::TearDown();
  }

  // Starts `turbokv serve` on a free port of 18100..18199 (a port in use makes
  // the server exit with "cannot listen", and the next one is tried) and
  // returns once it has bound its port and answers /health.
  void start_server(const std::vector<std::string>& flags, const std::string& model = kModel) {
    std::mt19937 rng(std::random_device{}());
    const int first = 18100 + static_cast<int>(rng() % 100);
    for (int k = 0; k < 100; ++k) {
      port_ = 18100 + (first - 18100 + k) % 100;
      std::vector<std::string> args = {TKV_BINARY, "serve", "-m", model, "--port", std::to_string(port_)};
      args.insert(args.end(), flags.begin(), flags.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, path("server.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      ASSERT_EQ(posix_spawn(&pid_, TKV_BINARY, &fa, nullptr, argv.data(), environ), 0);
      posix_spawn_file_actions_destroy(&fa);
      // Polls (no time limit of its own: ctest's timeout ends a server that never starts).
      for (;;) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          const std::string log = slurp(path("server.log"));
          ASSERT_NE(log.find("cannot listen"), std::string::npos) << "turbokv serve failed:\n" << log;
          break;  // port in use: the next one
        }
        if (slurp(path("server.log")).find("\nlistening on") != std::string::npos) {
          httplib::Client cli("127.0.0.1", port_);
          if (auto r = cli.Get("/health"); r && r->status == 200) return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    FAIL() << "no free port in 18100..18199";
  }

  // SIGTERM; returns the exit status (waits for it).
  int stop_server() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(LoadgenTest, ServerStaysConsistentUnderLoad) {
  TKV_NEED_SHARED(kModel);
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "4", "-c", "512", "--kv-budget", "16MiB", "-t", "1"}));
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);

  const CliResult r = run("loadgen --url " + url + " --clients 8 --requests 5 --max-tokens 8 --seed 7");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("requests: 40, errors: 0,"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("latency: p50"), std::string::npos) << r.out;

  // Every response has been read: the engine finished and released those
  // sequences before (under the lock /metrics takes), and without
  // --slot-save-path idle slots keep no blocks.
  httplib::Client cli("127.0.0.1", port_);
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_EQ(metric(m->body, "turbokv_requests_running"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_requests_queued"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_kv_blocks_used"), 0) << m->body;
  EXPECT_EQ(metric(m->body, "turbokv_requests_total"), 40) << m->body;
  EXPECT_GT(metric(m->body, "turbokv_tokens_generated_total"), 0) << m->body;

  const int status = stop_server();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << slurp(path("server.log"));
}

TEST_F(LoadgenTest, CountsErrorsAndRejectsBadFlags) {
  TKV_NEED_SHARED(kModel);
  // A server with an API key: loadgen without it gets 401 on every request.
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "2", "-c", "256", "--kv-budget", "8MiB", "-t", "1", "--api-key", "k"}));
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);
  CliResult r = run("loadgen --url " + url + " --clients 2 --requests 2 --max-tokens 4");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("requests: 4, errors: 4,"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("HTTP 401"), std::string::npos) << r.err;
  r = run("loadgen --url " + url + " --clients 2 --requests 2 --max-tokens 4 --api-key k --stream-fraction 1");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const int status = stop_server();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(path("server.log"));

  r = run("loadgen --url " + url + " --clients 0");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--clients"), std::string::npos) << r.err;
  r = run("loadgen --url " + url + " --stream-fraction 1.5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--stream-fraction"), std::string::npos) << r.err;
  r = run("loadgen --url ftp://x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("http://"), std::string::npos) << r.err;
}

// Raw sockets for the attacker below.
int attack_dial(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends head then piece repeatedly until the server answers or closes, or
// max_bytes or 10 s; returns whether it answered 4xx.
bool attack_flood(int port, const std::string& head, const std::string& piece, size_t max_bytes) {
  const int fd = attack_dial(port);
  if (fd < 0) return false;
  (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  size_t sent = 0;
  const auto t0 = std::chrono::steady_clock::now();
  bool answered = false;
  while (sent < max_bytes && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[16] = {};
      answered = ::recv(fd, buf, 12, 0) == 12 && std::string(buf).rfind("HTTP/1.1 4", 0) == 0;
      break;
    }
    const ssize_t w = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EAGAIN) continue;
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
  ::close(fd);
  return answered;
}

// The load test with an attacker beside it (issue #31): slow clients sending
// a byte at a time, chunked bodies far over --max-body, header floods; the
// well-behaved clients see no error, every attack is refused, and SIGTERM
// with slow clients still connected exits 0 within 2 s.
TEST_F(LoadgenTest, WellBehavedClientsAreServedWhileAttacked) {
  TKV_NEED_SHARED(kModel);
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "4", "-c", "512", "--kv-budget", "16MiB", "-t", "1", "--timeout", "2",
                                        "--max-body", "1MiB"}));
  const std::string url = "http://127.0.0.1:" + std::to_string(port_);
  std::atomic<bool> done{false};
  std::atomic<int> refused{0}, floods{0};
  std::vector<int> slow;
  std::thread attacker([&] {
    const auto t0 = std::chrono::steady_clock::now();
    std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n", headers;
    for (int i = 0; i < 2000; ++i) headers += "X-Flood: 1\r\n";
    for (int round = 0; !done && round < 200 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120); ++round) {
      while (slow.size() < 40) {  // slow clients: a partial head, then a byte at a time
        const int fd = attack_dial(port_);
        if (fd < 0) break;
        (void)::send(fd, "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
        slow.push_back(fd);
      }
      for (int fd : slow) (void)::send(fd, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (size_t i = 0; i < slow.size();) {  // closed at the deadline: replaced next round
        char b[256];
        const ssize_t n = ::recv(slow[i], b, sizeof b, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN)) {
          ::close(slow[i]);
          slow.erase(slow.begin() + static_cast<long>(i));
        } else {
          ++i;
        }
      }
      ++floods;
      refused += attack_flood(port_, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", chunk, 64u << 20);
      refused += attack_flood(port_, "GET /v1/models HTTP/1.1\r\n", headers, 16u << 20);
      ++floods;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const CliResult r = run("loadgen --url " + url + " --clients 8 --requests 5 --max-tokens 8 --seed 7");
  done = true;
  attacker.join();
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("requests: 40, errors: 0,"), std::string::npos) << r.out << r.err;
  EXPECT_GT(floods.load(), 0);
  EXPECT_EQ(refused.load(), floods.load()) << "every oversized body and header flood answered 413/431";
  // Slow clients for the SIGTERM below: the attacker's, or (when the server
  // closed them all at their deadline, as under the sanitizers) fresh ones.
  while (slow.size() < 8) {
    const int fd = attack_dial(port_);
    ASSERT_GE(fd, 0);
    (void)::send(fd, "POST /v1/completions HTTP/1.1\r\n", 31, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  // SIGTERM while slow clients are still connected.
  const auto t0 = std::chrono::steady_clock::now();
  const int status = stop_server();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int fd : slow) ::close(fd);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << slurp(path("server.log"));
  EXPECT_LT(sec, 2.0) << "seconds from SIGTERM to exit with " << slow.size() << " slow clients";
}

// The API key from a file or the environment (not only the command line,
// which any user can read in /proc/PID/cmdline).
TEST_F(LoadgenTest, ApiKeyFromFileOrEnvironment) {
  TKV_NEED_SHARED(kModel);
  std::ofstream(path("key.txt")) << "from-file\n";
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "1", "-c", "256", "--kv-budget", "8MiB", "-t", "1", "--api-key-file", path("key.txt")}));
  {
    httplib::Client c("127.0.0.1", port_);
    EXPECT_EQ(c.Get("/v1/models")->status, 401);
    c.set_bearer_token_auth("from-file");
    EXPECT_EQ(c.Get("/v1/models")->status, 200);
  }
  EXPECT_EQ(stop_server(), 0);
  ::setenv("TURBOKV_API_KEY", "from-env", 1);
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "1", "-c", "256", "--kv-budget", "8MiB", "-t", "1"}));
  ::unsetenv("TURBOKV_API_KEY");
  {
    httplib::Client c("127.0.0.1", port_);
    EXPECT_EQ(c.Get("/v1/models")->status, 401);
    c.set_bearer_token_auth("from-env");
    EXPECT_EQ(c.Get("/v1/models")->status, 200);
  }
  EXPECT_EQ(stop_server(), 0);
  // Checked before the model is loaded (a missing model would be the other error).
  const CliResult r = run("serve -m " + path("no-model.gguf") + " --api-key-file " + path("none.txt"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--api-key-file"), std::string::npos) << r.err;
}


// ------------------------------------------------------------ gpt-oss, harmony

const std::string kGpt2Vocab = std::string(TKV_SHARED_DIR) + "/data/tokenizer/ggml-vocab-gpt-2.gguf";

// A gpt-oss file with o200k_harmony's special tokens (gen-model --harmony-vocab
// on GPT-2's byte-level vocabulary) whose replies follow a script, as a
// trained gpt-oss writes them: the embedding and output rows of a few tokens
// are set so that each of them (its embedding, 100 times a unit vector,
// outweighs what the random layers add) is followed by the next token of
//   "istant" <|channel|> {analysis | final} <|message|> " Hello" <|end|>
//   <|start|> "ass" "istant" <|channel|> ...
// with analysis and final equally likely after <|channel|> (equal output
// rows): sampled with a seed, some messages are analysis, some final.
void write_harmony_model(const std::string& out) {
  auto v = gguf::File::open(kGpt2Vocab);
  ASSERT_TRUE(v.ok()) << v.error();
  GenModelOptions o;
  o.arch = "gpt-oss";
  o.harmony_vocab = true;
  o.layers = 2;
  o.dim = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.head_dim = 16;
  o.ffn = 64;
  o.experts = 4;
  o.experts_used = 2;
  o.window = 16;
  o.type = "F32";
  o.seed = 3;
  const std::string plain = out + ".plain.gguf";
  ASSERT_TRUE(generate_model(o, v->get(), plain).ok());
  auto f = gguf::File::open(plain);
  ASSERT_TRUE(f.ok()) << f.error();
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.error();
  auto id = [&](const char* t) {
    const auto ids = tok->encode(t, false, true);
    EXPECT_EQ(ids.size(), 1u) << t;
    return ids.empty() ? 0 : ids[0];
  };
  const int32_t channel = id("<|channel|>"), analysis = id("analysis"), final_ = id("final"), message = id("<|message|>"),
                hello = id(" Hello"), end = id("<|end|>"), start = id("<|start|>"), ass = id("ass"), istant = id("istant");
  // (token, the tokens that may follow it)
  const std::vector<std::pair<int32_t, std::vector<int32_t>>> next = {
      {istant, {channel}}, {channel, {analysis, final_}}, {analysis, {message}}, {final_, {message}},
      {message, {hello}},  {hello, {end}},                {end, {start}},        {start, {ass}},
      {ass, {istant}}};
  const size_t E = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> g;
  std::map<int32_t, std::vector<float>> unit;
  for (const auto& [t, after] : next) {
    std::vector<float> u(E);
    float n2 = 0;
    for (float& x : u) n2 += (x = g(rng)) * x;
    for (float& x : u) x /= std::sqrt(n2);
    unit[t] = u;
  }
  std::map<int32_t, std::vector<float>> out_rows;  // Σ over the tokens it follows of 10 u
  for (const auto& [t, after] : next)
    for (int32_t a : after) {
      auto& r = out_rows[a];
      r.resize(E, 0.0f);
      for (size_t c = 0; c < E; ++c) r[c] += 10.0f * unit[t][c];
    }
  gguf::Writer w;
  std::map<std::string, const gguf::Tensor*> kept;
  ASSERT_NO_FATAL_FAILURE(copy_gguf(**f, w, {}, [&](const gguf::Tensor& t) {
    if (t.name != "output.weight" && t.name != "token_embd.weight") return true;
    kept[t.name] = &t;
    return false;
  }));
  for (const auto& [name, t] : kept) {
    ASSERT_TRUE(t->type == 0 && t->dims.size() == 2 && t->dims[0] == E) << name;
    std::vector<float> rows(t->n_bytes / 4);
    std::memcpy(rows.data(), t->data, t->n_bytes);
    if (name == "token_embd.weight") {
      for (const auto& [tk, u] : unit)
        for (size_t c = 0; c < E; ++c) rows[size_t(tk) * E + c] = 100.0f * u[c];
    } else {
      for (const auto& [tk, r] : out_rows) std::copy(r.begin(), r.end(), rows.begin() + size_t(tk) * E);
    }
    ASSERT_TRUE(w.add_tensor(name, t->dims, 0, rows.data(), t->n_bytes).ok());
  }
  ASSERT_EQ(kept.size(), 2u);
  ASSERT_TRUE(w.write(out).ok());
  std::remove(plain.c_str());
}

// The prompt gpt-oss's template writes for [system "Be brief.", user "Hello"].
std::string harmony_prompt() {
  char today[16];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(today, sizeof(today), "%Y-%m-%d", &tm);
  return std::string("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
                     "Knowledge cutoff: 2024-06\nCurrent date: ") +
         today +
         "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
         "every message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
         "<|start|>user<|message|>Hello<|end|><|start|>assistant";
}

// The server on a gpt-oss file: the harmony template is detected (from the
// file's template) and applied (the prompt has as many tokens as gpt-oss's),
// and the client receives only the final channel's text, streamed and not:
// the scripted reply (write_harmony_model) holds 8 messages, each "<|channel|>
// analysis|final <|message|> Hello"; the client sees " Hello" once per final
// message and nothing else (no analysis, header, role or special token).
TEST_F(LoadgenTest, GptOssChatIsHarmonyAndShowsOnlyTheFinalChannel) {
  TKV_NEED_SHARED(kGpt2Vocab);
  const std::string model = path("gpt-oss-harmony.gguf");
  ASSERT_NO_FATAL_FAILURE(write_harmony_model(model));
  ASSERT_NO_FATAL_FAILURE(start_server(
      {"-np", "2", "-c", "512", "--kv-budget", "16MiB", "-t", "1", "--cache-type-k", "f16", "--cache-type-v", "f16"},
      model));
  httplib::Client cli("127.0.0.1", port_);
  // (httplib's default 5 s read timeout: 64 tokens under the sanitizers beside
  // another test's load took longer on a 2-core Zen 3 and read "no response".)
  cli.set_read_timeout(300, 0);
  auto props = cli.Get("/props");
  ASSERT_TRUE(props && props->status == 200);
  const auto pj = nlohmann::json::parse(props->body);
  EXPECT_EQ(pj["chat_template"], "harmony") << props->body;
  EXPECT_EQ(pj["chat_template_fallback"], false) << props->body;

  const int max_tokens = 64;  // 8 messages of 8 tokens
  nlohmann::json req = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}}},
                        {"max_tokens", max_tokens}, {"temperature", 1}, {"seed", 5}};
  auto r = cli.Post("/v1/chat/completions", req.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  const auto rj = nlohmann::json::parse(r->body);
  const std::string content = rj["choices"][0]["message"]["content"];
  EXPECT_EQ(rj["choices"][0]["finish_reason"], "length") << r->body;
  EXPECT_EQ(rj["usage"]["completion_tokens"], max_tokens) << r->body;

  auto f = gguf::File::open(model);
  ASSERT_TRUE(f.ok()) << f.error();
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.error();
  EXPECT_EQ(rj["usage"]["prompt_tokens"], tok->encode(harmony_prompt(), true, true).size())
      << "the prompt is not gpt-oss's harmony prompt";

  // " Hello" k times, 0 < k < 8: some messages were final, some analysis.
  int k = 0;
  for (size_t at = 0; content.compare(at, 6, " Hello") == 0; at += 6) ++k;
  EXPECT_EQ(content, [&] { std::string s; for (int i = 0; i < k; ++i) s += " Hello"; return s; }()) << content;
  EXPECT_GT(k, 0) << content;
  EXPECT_LT(k, 8) << content;

  // Streamed with the same seed: the deltas concatenate to the same text.
  req["stream"] = true;
  auto s = cli.Post("/v1/chat/completions", req.dump(), "application/json");
  ASSERT_TRUE(s && s->status == 200);
  std::string streamed;
  for (size_t pos = 0; (pos = s->body.find("data: ", pos)) != std::string::npos; pos += 6) {
    const size_t end = s->body.find("\n\n", pos);
    const std::string data = s->body.substr(pos + 6, end - pos - 6);
    if (data == "[DONE]") break;
    const auto j = nlohmann::json::parse(data);
    const auto& d = j["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) streamed += d["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, content);
  EXPECT_EQ(stop_server(), 0);
}

// A short load test on the gpt-oss file: concurrent clients, chat and plain
// completions, streamed and not, every response checked; no errors.
TEST_F(LoadgenTest, GptOssHarmonyServerStaysConsistentUnderLoad) {
  TKV_NEED_SHARED(kGpt2Vocab);
  const std::string model = path("gpt-oss-harmony.gguf");
  ASSERT_NO_FATAL_FAILURE(write_harmony_model(model));
  ASSERT_NO_FATAL_FAILURE(start_server({"-np", "3", "-c", "512", "--kv-budget", "16MiB", "-t", "1"}, model));
  const CliResult r = run("loadgen --url http://127.0.0.1:" + std::to_string(port_) +
                          " --clients 6 --requests 4 --max-tokens 12 --chat-fraction 0.75 --seed 3");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("requests: 24, errors: 0,"), std::string::npos) << r.out << r.err;
  const int status = stop_server();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << slurp(path("server.log"));
}

// A harmony template on a vocabulary without its tokens is refused by name,
// before the server listens (an address it cannot listen on ends it at once
// if the check is missing).
TEST_F(LoadgenTest, GptOssHarmonyOnAVocabularyWithoutItsTokensIsRefused) {
  TKV_NEED_SHARED(kModel);
  const CliResult r = run("serve -m " + kModel + " --chat-template harmony --host 192.0.2.1 --port 18099");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("no control token <|start|>"), std::string::npos) << r.err;
}
}  // namespace
}  // namespace tkv
