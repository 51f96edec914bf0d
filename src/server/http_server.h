// The HTTP face of `turbokv serve`: OpenAI's /v1/completions,
// /v1/chat/completions and /v1/models, llama-server's /health, /props,
// /tokenize, /detokenize, /slots and /metrics, over one Engine.
//
// Connections are turbokv's own (not cpp-httplib's thread per connection,
// which read chunked bodies whole, kept any number of headers, and gave
// every slow client a thread and a timeout that restarted with each byte):
// one poll() thread accepts and reads every connection without blocking,
// under one request budget (http_request.h: head bytes, header count, body
// bytes whatever the framing) and one deadline for the whole request, and
// hands only complete requests to a bounded pool of workers, which run the
// handlers (written against cpp-httplib's Request/Response types) and write
// the response. Open connections are capped in all and per client address;
// a client that goes away cancels its request, streamed or not.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "text/chat_template.h"
#include "server/engine.h"
#include "util/status.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tkv::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (tests)
  std::string api_key;           // when set, every endpoint but /health needs "Authorization: Bearer KEY"
  std::string slot_save_path;    // directory of /slots save|restore files; empty: disabled
  size_t max_body = 16u << 20;   // request bodies larger than this get 413 (Content-Length or chunked)
  size_t max_head_bytes = 32u << 10;  // request line + headers; more gets 431
  size_t max_headers = 100;           // header lines; more gets 431
  int json_depth = 64;                // JSON nesting deeper than this gets 400
  int request_timeout_ms = 30000;     // a whole request (head and body) must arrive within this from its first byte
  int idle_timeout_ms = 10000;        // a connection with no request byte for this long is closed
  int write_timeout_ms = 30000;       // a response write that makes no progress for this long ends the connection
  int max_connections = 512;          // open connections; more are answered 503 and closed
  int max_connections_per_client = 128;  // open connections from one client address
  int workers = 0;                    // request handler threads (0: slots + queue + 8)
  size_t max_buffered = 0;            // request bytes held by all connections being read (0: 4 x max_body)
  int send_buffer_bytes = 0;          // SO_SNDBUF of each connection (0: the system's, autotuned)
  std::string model_id;          // the name /v1/models reports
  std::shared_ptr<kvstore::KvStore> kv_store;  // its state on /health (the engine uses it)
  ChatTemplate chat_template;
};

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  HttpServer(const Model& model, Engine& engine, HttpOptions opt);
  ~HttpServer();
  // Binds the socket; the port in use (the chosen one for port 0). Removes
  // temporary slot files a killed save left behind.
  Expected<int> bind();
  // Serves until stop() (blocking). On stop: no new connection is accepted,
  // connections being read or idle are closed at once, responses in progress
  // get up to half a second to end (streams end with an error chunk when the
  // engine stops first), then their sockets are shut down.
  void serve();
  void stop();
  // Open connections now (tests).
  int connections() const;

  struct Conn;

 private:
  void routes();
  void route(const std::string& method, const std::string& path, Handler h);
  void dispatch(httplib::Request& req, httplib::Response& res);
  void worker();
  void handle(Conn& c);
  void release(std::unique_ptr<Conn> c);  // closes, uncounts
  size_t max_prompt_bytes() const;
  const Model& model_;
  Engine& engine_;
  HttpOptions opt_;
  std::map<std::string, Handler> routes_;  // "METHOD path"
  Handler slot_action_;                    // POST /slots/ID
  int listen_fd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  size_t max_piece_ = 1;  // the longest vocabulary piece (bytes)

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::unique_ptr<Conn>> jobs_;
  std::vector<std::unique_ptr<Conn>> returned_;  // kept-alive connections back to the reader
  std::set<int> busy_fds_;                       // connections a worker holds
  std::map<std::string, int> per_client_;
  int open_ = 0, active_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace tkv::server
