// `turbokv serve` under attack (issue #31): each reproduction of the probe
// against an Engine and HttpServer in this process (free 127.0.0.1 port,
// the reference model), driven with raw sockets where the attack is in the
// framing. Each states its bound: the engine keeps serving a normal request
// while the attack runs, peak RSS grows by less than a stated amount, the
// server stops within 2 s. The HTTP reader itself (ServerHttp.*) is tested
// without sockets.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "server/engine.h"
#include "server/http_request.h"
#include "server/http_server.h"

namespace tkv {
namespace attack {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
const std::string kModelPath = std::string(TKV_SHARED_DIR) + "/models/ref-5m/ref-5m-f32.gguf";

const Model& model() {
  static std::unique_ptr<Model> m = [] {
    auto r = Model::load(kModelPath);
    EXPECT_TRUE(r.ok()) << r.error();
    return std::move(*r);
  }();
  return *m;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// RSS bounds are checked in the Release build: under AddressSanitizer freed
// memory waits in its quarantine and the heap has shadow memory, so RSS
// says nothing about what the server keeps.
#ifdef TKV_SANITIZED
constexpr bool kRssMeaningful = false;
#else
constexpr bool kRssMeaningful = true;
#endif

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
long status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::strlen(field) + 1));
  return -1;
}
// Resets VmHWM to the current RSS, so that the peak of what follows can be read.
void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

struct Server {
  std::unique_ptr<server::Engine> engine;
  std::unique_ptr<server::HttpServer> http;
  std::thread thread;
  int port = 0;
  bool stopped = false;
  explicit Server(server::EngineOptions eo = {}, server::HttpOptions ho = {}) {
    KvCacheOptions co;
    co.type_k = co.type_v = "tq4";
    if (eo.kv_budget == 0) eo.kv_budget = size_t(64) << 20;
    if (eo.threads <= 0) eo.threads = 1;
    auto e = server::Engine::create(model(), co, eo);
    EXPECT_TRUE(e.ok()) << e.error();
    engine = std::move(*e);
    ho.port = 0;
    ho.model_id = "ref-5m";
    http = std::make_unique<server::HttpServer>(model(), *engine, ho);
    auto p = http->bind();
    EXPECT_TRUE(p.ok()) << p.error();
    port = *p;
    thread = std::thread([this] { http->serve(); });
  }
  // Stops as `turbokv serve` does on SIGTERM; returns the seconds it took.
  double stop() {
    const auto t0 = Clock::now();
    engine->stop();
    http->stop();
    thread.join();
    stopped = true;
    return seconds_since(t0);
  }
  ~Server() {
    if (!stopped) stop();
  }
  httplib::Client client(int timeout_s = 60) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(timeout_s, 0);
    c.set_connection_timeout(timeout_s, 0);
    return c;
  }
  double metric(const std::string& name) const {
    auto c = client();
    auto r = c.Get("/metrics");
    if (!r || r->status != 200) return -1;
    const std::string key = "\nturbokv_" + name + " ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::stod(r->body.substr(at + key.size()));
  }
  // Polls a metric until it equals want (at most `seconds`); its last value.
  double wait_metric(const std::string& name, double want, double seconds) const {
    const auto t0 = Clock::now();
    double v = metric(name);
    while (v != want && seconds_since(t0) < seconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      v = metric(name);
    }
    return v;
  }
  // A normal greedy completion: its HTTP status (-1: no answer) and the seconds it took.
  std::pair<int, double> normal_request(int timeout_s = 30) const {
    const auto t0 = Clock::now();
    auto c = client(timeout_s);
    auto r = c.Post("/v1/completions", json{{"prompt", "The city"}, {"max_tokens", 4}, {"temperature", 0}}.dump(),
                    "application/json");
    return {r ? r->status : -1, seconds_since(t0)};
  }
};

// A raw client socket to 127.0.0.1:port (blocking); -1 on failure.
int dial(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool put(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t w = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// What the server sends until it closes or `seconds` pass.
std::string read_all(int fd, double seconds) {
  std::string out;
  const auto t0 = Clock::now();
  char buf[8192];
  while (seconds_since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The server closed fd (or reset it) within `seconds`.
bool closed_by_server(int fd, double seconds) {
  const auto t0 = Clock::now();
  char buf[4096];
  while (seconds_since(t0) < seconds) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
  }
  return false;
}

// Sends `head` then `piece` repeatedly (up to max_bytes or `seconds`),
// stopping as soon as the server answers; returns the body bytes sent and
// the answer.
std::pair<size_t, std::string> flood(int fd, const std::string& head, const std::string& piece, size_t max_bytes,
                                     double seconds) {
  put(fd, head);
  size_t sent = 0;
  const auto t0 = Clock::now();
  while (sent < max_bytes && seconds_since(t0) < seconds) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) break;
    const ssize_t w = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
  return {sent, read_all(fd, 5)};
}

// ---------------------------------------------------------------- reader

server::HttpRequestParser::State feed_bytewise(server::HttpRequestParser& p, const std::string& s) {
  for (char c : s) {
    p.feed(&c, 1);
    if (p.done() || p.failed()) break;
  }
  return p.state();
}

TEST(ServerHttp, ReadsContentLengthAndChunkedBodiesInAnySplit) {
  const std::string cl = "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
  const std::string ch = "POST /p HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nT: v\r\n\r\n";
  for (const std::string& s : {cl, ch}) {
    server::HttpRequestParser whole, bytes;
    whole.feed(s.data(), s.size());
    ASSERT_TRUE(whole.done()) << whole.error();
    EXPECT_EQ(whole.request().body, "hello");
    feed_bytewise(bytes, s);
    ASSERT_TRUE(bytes.done()) << bytes.error();
    EXPECT_EQ(bytes.request().body, "hello");
  }
  server::HttpRequestParser p;
  p.feed(cl.data(), cl.size());
  EXPECT_EQ(p.request().path, "/v1/completions");
  EXPECT_EQ(p.request().query, "x=1");
  EXPECT_EQ(p.request().header("content-length"), "5");
  EXPECT_TRUE(p.request().keep_alive);
}

TEST(ServerHttp, EnforcesTheBudgetWhileReading) {
  server::HttpLimits lim;
  lim.max_body = 1000;
  lim.max_headers = 10;
  lim.max_head_bytes = 2048;
  auto status_of = [&](const std::string& s) {
    server::HttpRequestParser p(lim);
    p.feed(s.data(), s.size());
    return p.failed() ? p.error_status() : p.done() ? 200 : 0;
  };
  // A chunked body over the limit fails at the chunk that passes it, before the rest arrives.
  std::string chunked = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) chunked += "190\r\n" + std::string(400, 'a') + "\r\n";
  EXPECT_EQ(status_of(chunked), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n"), 413);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\n" + std::string(1000, 'x')), 200);
  // Eleven header lines: refused while the head is still arriving (no blank line yet).
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 20; ++i) many += "X-A: b\r\n";
  EXPECT_EQ(status_of(many), 431);
  EXPECT_EQ(status_of("GET / HTTP/1.1\r\nX-Big: " + std::string(3000, 'b')), 431);
  // Smuggling and malformed framing.
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n"), 400);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
  EXPECT_EQ(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"), 400);
  EXPECT_EQ(status_of("GET / HTTP/2.0\r\n\r\n"), 505);
  EXPECT_EQ(status_of("GET nopath HTTP/1.1\r\n\r\n"), 400);
}

// ---------------------------------------------------------------- engine

// #31.1: max_tokens near INT_MAX overflowed P + max_tokens in admission and
// the request waited at the head of the queue for ever, and every later
// request behind it.
TEST(ServerAttack, HugeMaxTokensDoesNotStopTheEngine) {
  server::EngineOptions eo;
  eo.ctx = 128;
  eo.n_parallel = 2;
  Server s(eo);
  std::vector<int> status(3, -1);
  std::vector<std::string> body(3);
  std::vector<std::thread> th;
  const std::vector<std::pair<std::string, json>> attacks = {
      {"/v1/completions", {{"prompt", "a"}, {"max_tokens", 2147483646}, {"temperature", 0}}},
      {"/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "a"}}}}, {"n_predict", 2147483647}, {"temperature", 0}}},
      {"/v1/completions", {{"prompt", "a"}, {"max_tokens", 2147483647}, {"stream", true}, {"temperature", 0}}}};
  for (size_t i = 0; i < attacks.size(); ++i)
    th.emplace_back([&, i] {
      auto c = s.client(60);
      auto r = c.Post(attacks[i].first, attacks[i].second.dump(), "application/json");
      if (r) {
        status[i] = r->status;
        body[i] = r->body;
      }
    });
  const auto [st, sec] = s.normal_request(60);
  for (auto& t : th) t.join();
  EXPECT_EQ(st, 200);
  EXPECT_LT(sec, 30) << "a normal request behind the attack";
  for (size_t i = 0; i < attacks.size(); ++i) {
    EXPECT_EQ(status[i], 200) << attacks[i].second.dump() << " -> " << body[i];
    EXPECT_EQ(body[i].find("error"), std::string::npos) << body[i];
  }
  EXPECT_EQ(s.wait_metric("requests_queued", 0, 5), 0);
  EXPECT_EQ(s.wait_metric("kv_blocks_used", 0, 5), 0);
}

// ---------------------------------------------------------------- reading

// #31.2: a chunked body was read whole whatever its size.
TEST(ServerAttack, ChunkedBodyOverTheLimitIsRefusedWhileItIsRead) {
  server::HttpOptions ho;
  ho.max_body = 1u << 20;
  Server s({}, ho);
  reset_peak_rss();
  const long base = status_kb("VmHWM:");
  const int fd = dial(s.port);
  ASSERT_GE(fd, 0);
  const std::string chunk = "10000\r\n" + std::string(0x10000, 'a') + "\r\n";
  const auto [sent, answer] = flood(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                                    chunk, size_t(100) << 20, 20);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer.substr(0, 300);
  EXPECT_NE(answer.find("over the limit of 1048576 bytes"), std::string::npos) << answer.substr(0, 300);
  EXPECT_LT(sent, size_t(16) << 20) << "bytes the server let the client send";
  const auto [st, sec] = s.normal_request();
  EXPECT_EQ(st, 200);
  if (kRssMeaningful) {
    EXPECT_LT((status_kb("VmHWM:") - base) / 1024, 64) << "peak RSS growth, MiB";
  }
}

// #31.3: a million headers were kept, before the key check.
TEST(ServerAttack, HeaderFloodIsRefusedBeforeTheKeyCheck) {
  server::HttpOptions ho;
  ho.api_key = "sesame";
  Server s({}, ho);
  reset_peak_rss();
  const long base = status_kb("VmHWM:");
  int fd = dial(s.port);
  ASSERT_GE(fd, 0);
  std::string lines;
  for (int i = 0; i < 4096; ++i) lines += "X-A: b\r\n";
  auto [sent, answer] = flood(fd, "GET /v1/models HTTP/1.1\r\n", lines, size_t(12) << 20, 20);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 300);
  EXPECT_NE(answer.find("more than 100 header lines"), std::string::npos) << answer.substr(0, 300);
  EXPECT_LT(sent, size_t(8) << 20);
  // One endless header line: the head's byte limit.
  fd = dial(s.port);
  ASSERT_GE(fd, 0);
  std::tie(sent, answer) = flood(fd, "GET /v1/models HTTP/1.1\r\nX-Long: ", std::string(65536, 'b'), size_t(12) << 20, 20);
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 431", 0), 0u) << answer.substr(0, 300);
  EXPECT_NE(answer.find("head is over the limit of 32768 bytes"), std::string::npos) << answer.substr(0, 300);
  if (kRssMeaningful) {
    EXPECT_LT((status_kb("VmHWM:") - base) / 1024, 64) << "peak RSS growth, MiB";
  }
  EXPECT_EQ(s.normal_request().first, 401);  // the key check still applies
}

// #31.4: a 16 MB prompt was tokenized in full before the "too long" check,
// and deeply nested JSON took gigabytes that stayed.
TEST(ServerAttack, LongPromptsAndDeepJsonAreRefusedCheaply) {
  server::EngineOptions eo;
  eo.ctx = 256;
  Server s(eo);
  reset_peak_rss();
  const long base = status_kb("VmHWM:");
  {
    std::string prompt;
    prompt.reserve(6u << 20);
    while (prompt.size() < (6u << 20)) prompt += "the history of the city ";
    auto c = s.client();
    auto r = c.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 4}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body.substr(0, 300);
    EXPECT_NE(r->body.find("the context holds 256 tokens"), std::string::npos) << r->body.substr(0, 300);
    EXPECT_NE(r->body.find("\"param\":\"prompt\""), std::string::npos) << r->body.substr(0, 300);
  }
  {
    const std::string deep = "{\"prompt\":" + std::string(4u << 20, '[') + "1" + std::string(4u << 20, ']') + "}";
    auto c = s.client();
    auto r = c.Post("/v1/completions", deep, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("deeper than the limit of 64"), std::string::npos) << r->body.substr(0, 300);
  }
  if (kRssMeaningful) {
    EXPECT_LT((status_kb("VmHWM:") - base) / 1024, 96) << "peak RSS growth, MiB";
  }
  // Memory is given back after a large request: no plateau.
  if (kRssMeaningful) {
    EXPECT_LT((status_kb("VmRSS:") - base) / 1024, 48) << "RSS growth after the requests, MiB";
  }
  EXPECT_EQ(s.normal_request().first, 200);
}

// #31.5: slow clients took every handler thread and a timeout that
// restarted with each byte kept them.
TEST(ServerAttack, SlowClientsNeitherBlockOthersNorStayPastTheDeadline) {
  server::HttpOptions ho;
  ho.request_timeout_ms = 1500;
  ho.idle_timeout_ms = 1500;
  ho.max_connections = 1000;
  ho.max_connections_per_client = 1000;
  Server s({}, ho);
  std::vector<int> slow;
  for (int i = 0; i < 120; ++i) {
    const int fd = dial(s.port);
    ASSERT_GE(fd, 0);
    put(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread drip([&] {  // one byte per connection every 100 ms, for at most 4 s
    const auto t0 = Clock::now();
    while (!stop && seconds_since(t0) < 4) {
      for (int fd : slow) (void)::send(fd, "X", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (int i = 0; i < 3; ++i) {
    const auto [st, sec] = s.normal_request(20);
    EXPECT_EQ(st, 200);
    EXPECT_LT(sec, 5) << "a normal request while 120 clients send a byte at a time";
  }
  // Each slow client is closed at its request deadline though it keeps sending.
  int closed = 0;
  const auto t0 = Clock::now();
  for (int fd : slow) closed += closed_by_server(fd, std::max(0.1, 3.5 - seconds_since(t0)));
  stop = true;
  drip.join();
  for (int fd : slow) ::close(fd);
  EXPECT_EQ(closed, 120);
}

// #31.6: SIGTERM waited for slow clients (43 s).
TEST(ServerAttack, StopEndsStreamsAndClosesSlowClientsWithinTwoSeconds) {
  server::EngineOptions eo;
  eo.ctx = 4096;
  server::HttpOptions ho;
  ho.send_buffer_bytes = 16384;  // a response of a few hundred KB fills it (no autotuning to megabytes)
  Server s(eo, ho);
  std::vector<int> slow;
  for (int i = 0; i < 5; ++i) {
    slow.push_back(dial(s.port));
    put(slow.back(), "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{");
  }
  // A stream that is read, and a large response to a client that reads nothing.
  const int reader = dial(s.port);
  const std::string sbody = json{{"prompt", "Once upon a time"}, {"stream", true}}.dump();
  put(reader, "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(sbody.size()) + "\r\n\r\n" + sbody);
  const int stuck = dial(s.port, 4096);
  std::string text;
  while (text.size() < (64u << 10)) text += "a b c d e f g h ";
  const std::string tbody = json{{"content", text}, {"with_pieces", true}}.dump();
  put(stuck, "POST /tokenize HTTP/1.1\r\nContent-Length: " + std::to_string(tbody.size()) + "\r\n\r\n" + tbody);
  std::string streamed;
  {
    const auto t0 = Clock::now();
    char buf[4096];
    while (streamed.find("data: ") == std::string::npos && seconds_since(t0) < 20) {
      const ssize_t n = ::recv(reader, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) streamed.append(buf, static_cast<size_t>(n));
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ASSERT_NE(streamed.find("data: "), std::string::npos) << "the stream never started";
  {  // the tokenize response has started (tokenizing is done): its writes now fill the stuck client's buffers
    const auto t0 = Clock::now();
    char c;
    while (::recv(stuck, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0 && seconds_since(t0) < 60)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  const double sec = s.stop();
  EXPECT_LT(sec, 2.0) << "seconds from stop to every thread joined";
  streamed += read_all(reader, 2);
  EXPECT_NE(streamed.find("shutting down"), std::string::npos) << streamed.substr(streamed.size() > 400 ? streamed.size() - 400 : 0);
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos);
  for (int fd : slow) {
    EXPECT_TRUE(closed_by_server(fd, 1));
    ::close(fd);
  }
  ::close(reader);
  ::close(stuck);
}

// #31.7: requests whose client had gone kept generating.
TEST(ServerAttack, AClientThatLeavesCancelsItsRequestQueuedOrRunning) {
  server::EngineOptions eo;
  eo.ctx = 4096;
  eo.n_parallel = 1;
  Server s(eo);
  auto request = [&](bool stream) {
    const int fd = dial(s.port);
    json b = {{"prompt", "Once upon a time"}, {"temperature", 0}};
    if (stream) b["stream"] = true;
    const std::string body = b.dump();
    put(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    return fd;
  };
  // Running, not streamed: dropped after 300 ms.
  int fd = request(false);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd);
  EXPECT_EQ(s.wait_metric("requests_cancelled_total", 1, 3), 1);
  EXPECT_EQ(s.wait_metric("kv_blocks_used", 0, 3), 0);
  // The one slot taken by a stream that is read; then one queued request of each kind, dropped.
  const int running = request(true);
  ASSERT_EQ(s.wait_metric("requests_running", 1, 5), 1);
  for (bool stream : {false, true}) {
    fd = request(stream);
    EXPECT_EQ(s.wait_metric("requests_queued", 1, 5), 1);
    ::close(fd);
    EXPECT_EQ(s.wait_metric("requests_queued", 0, 3), 0) << (stream ? "streamed" : "not streamed");
  }
  EXPECT_EQ(s.wait_metric("requests_cancelled_total", 3, 3), 3);
  EXPECT_EQ(s.metric("requests_running"), 1);
  ::close(running);
  EXPECT_EQ(s.wait_metric("requests_running", 0, 3), 0);
  EXPECT_EQ(s.wait_metric("kv_blocks_used", 0, 3), 0);
}

TEST(ServerAttack, ConnectionsAreCappedPerClientAddress) {
  server::HttpOptions ho;
  ho.max_connections_per_client = 4;
  Server s({}, ho);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(dial(s.port));
  for (int i = 0; i < 100 && s.http->connections() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int extra = dial(s.port);
  const std::string answer = read_all(extra, 3);
  EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
  EXPECT_NE(answer.find("--max-connections-per-client 4"), std::string::npos) << answer;
  ::close(extra);
  for (int fd : held) ::close(fd);
  for (int i = 0; i < 100 && s.http->connections() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.normal_request().first, 200);
}

// ---------------------------------------------------------------- slot files

TEST(ServerAttack, SlotFilesNeverFollowLinksBlockOrEmptyTheSlot) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("tkv_attack_slots_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path dir = root / "slots", outside = root / "outside";
  fs::create_directories(dir);
  fs::create_directories(outside);
  std::ofstream(dir / "old.bin.tmp.12345") << "stale";  // a save killed with -9
  server::EngineOptions eo;
  eo.ctx = 256;
  eo.n_parallel = 1;
  eo.block_tokens = 16;
  eo.keep_slot_cache = true;
  server::HttpOptions ho;
  ho.slot_save_path = dir.string();
  Server s(eo, ho);
  EXPECT_FALSE(fs::exists(dir / "old.bin.tmp.12345")) << "stale temporary file not removed at start";
  auto post = [&](const std::string& action, const std::string& file) {
    auto c = s.client(5);
    auto r = c.Post(("/slots/0?action=" + action).c_str(), json{{"filename", file}}.dump(), "application/json");
    return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string("no answer"));
  };
  auto slot_tokens = [&] {
    auto c = s.client();
    auto r = c.Get("/slots");
    return r ? json::parse(r->body)[0]["n_tokens"].get<int>() : -1;
  };
  ASSERT_EQ(s.normal_request().first, 200);
  const int held = slot_tokens();
  ASSERT_GT(held, 0);
  ASSERT_EQ(post("save", "good.bin").first, 200);
  // A valid slot file outside the directory, reached by a link inside it.
  fs::copy_file(dir / "good.bin", outside / "good.bin");
  fs::create_symlink(outside / "good.bin", dir / "link.bin");
  auto [st, body] = post("restore", "link.bin");
  EXPECT_EQ(st, 400) << body;
  EXPECT_NE(body.find("symbolic link"), std::string::npos) << body;
  // A FIFO: refused at once, and the engine is not held meanwhile.
  ASSERT_EQ(::mkfifo((dir / "fifo.bin").c_str(), 0600), 0);
  const auto t0 = Clock::now();
  std::tie(st, body) = post("restore", "fifo.bin");
  if (st != 400) {  // unblock a server stuck in open()
    const int w = ::open((dir / "fifo.bin").c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  EXPECT_EQ(st, 400) << body;
  EXPECT_NE(body.find("not a regular file"), std::string::npos) << body;
  EXPECT_LT(seconds_since(t0), 3);
  // A damaged file: refused, and the slot keeps what it held.
  std::ofstream(dir / "bad.bin") << std::string(4096, 'x');
  std::tie(st, body) = post("restore", "bad.bin");
  EXPECT_EQ(st, 400) << body;
  EXPECT_EQ(slot_tokens(), held) << "a failed restore emptied the slot";
  // Errors name the file, never the server's directory or PID.
  std::tie(st, body) = post("restore", "missing.bin");
  EXPECT_EQ(st, 400);
  EXPECT_NE(body.find("missing.bin"), std::string::npos) << body;
  EXPECT_EQ(body.find(root.string()), std::string::npos) << body;
  EXPECT_EQ(body.find(std::to_string(::getpid())), std::string::npos) << body;
  // A link at the saved name is replaced, never written through.
  std::ofstream(outside / "target.bin") << "keep";
  fs::create_symlink(outside / "target.bin", dir / "over.bin");
  EXPECT_EQ(post("save", "over.bin").first, 200);
  EXPECT_FALSE(fs::is_symlink(dir / "over.bin"));
  std::ifstream in(outside / "target.bin");
  std::string kept;
  in >> kept;
  EXPECT_EQ(kept, "keep");
  EXPECT_EQ(post("restore", "good.bin").first, 200);
  s.stop();
  fs::remove_all(root);
}

// ---------------------------------------------------------------- key, small ones

TEST(ServerAttack, ApiKeyFormsAndBodiesOfAnyContentType) {
  server::HttpOptions ho;
  ho.api_key = "sesame-open";
  Server s({}, ho);
  auto get = [&](const httplib::Headers& h) {
    auto c = s.client();
    auto r = c.Get("/v1/models", h);
    return r ? r->status : -1;
  };
  EXPECT_EQ(get({{"Authorization", "Bearer sesame-open"}}), 200);
  EXPECT_EQ(get({{"Authorization", "bearer sesame-open"}}), 200);
  EXPECT_EQ(get({{"Authorization", "BEARER  sesame-open"}}), 200);
  EXPECT_EQ(get({{"X-Api-Key", "sesame-open"}}), 200);
  for (const char* wrong : {"sesame-ope", "sesame-open!", "", "Sesame-open", "sesame-opeN"})
    EXPECT_EQ(get({{"Authorization", std::string("Bearer ") + wrong}}), 401) << wrong;
  EXPECT_EQ(get({{"Authorization", "Basic sesame-open"}}), 401);
  // curl -d sends application/x-www-form-urlencoded: bodies up to the limit are read as JSON all the same.
  auto c = s.client();
  c.set_bearer_token_auth("sesame-open");
  const std::string body = json{{"prompt", "a"}, {"user", std::string(10000, 'u')}, {"max_tokens", 2}}.dump();
  auto r = c.Post("/v1/completions", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

}  // namespace
}  // namespace attack
}  // namespace tkv
