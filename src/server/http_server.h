// The HTTP face of `turbokv serve` (cpp-httplib): OpenAI's /v1/completions,
// /v1/chat/completions and /v1/models, llama-server's /health, /props,
// /tokenize, /detokenize, /slots and /metrics, over one Engine.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "model/model.h"
#include "text/chat_template.h"
#include "server/engine.h"
#include "util/status.h"

namespace httplib {
class Server;
}

namespace tkv::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;               // 0: any free port (tests)
  std::string api_key;           // when set, every endpoint but /health needs "Authorization: Bearer KEY"
  std::string slot_save_path;    // directory of /slots save|restore files; empty: disabled
  size_t max_body = 16u << 20;   // request bodies larger than this get 413
  std::string model_id;          // the name /v1/models reports
  ChatTemplate chat_template;
};

class HttpServer {
 public:
  HttpServer(const Model& model, Engine& engine, HttpOptions opt);
  ~HttpServer();
  // Binds the socket; the port in use (the chosen one for port 0).
  Expected<int> bind();
  // Serves until stop() (blocking).
  void serve();
  void stop();

 private:
  void routes();
  const Model& model_;
  Engine& engine_;
  HttpOptions opt_;
  std::unique_ptr<httplib::Server> svr_;
  int listen_fd_ = -1;  // the listening socket, to raise its backlog after bind
};

}  // namespace tkv::server
