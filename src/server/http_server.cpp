#include "server/http_server.h"

#include <sys/socket.h>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/openai_api.h"

namespace tkv::server {
namespace {

using json = nlohmann::json;

void send_error(httplib::Response& res, int status, const std::string& msg, const std::string& param = {},
                const std::string& type = "invalid_request_error") {
  ApiError e;
  e.status = status;
  e.message = msg;
  e.param = param;
  e.type = type;
  res.status = status;
  res.set_content(error_json(e), "application/json");
}

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix,
                static_cast<unsigned long long>(salt ^ (++counter * 0x9e3779b97f4a7c15ull)));
  return buf;
}

// A slot file name: a plain name inside --slot-save-path.
bool safe_file_name(const std::string& f) {
  if (f.empty() || f.size() > 255 || f == "." || f == "..") return false;
  for (char c : f)
    if (c == '/' || c == '\\' || c == '\0') return false;
  return true;
}

void metric(std::ostringstream& o, const char* name, const char* type, const char* help, double v) {
  o << "# HELP turbokv_" << name << " " << help << "\n# TYPE turbokv_" << name << " " << type << "\nturbokv_" << name
    << " " << v << "\n";
}

}  // namespace

HttpServer::HttpServer(const Model& model, Engine& engine, HttpOptions opt)
    : model_(model), engine_(engine), opt_(std::move(opt)), svr_(std::make_unique<httplib::Server>()) {
  routes();
}

HttpServer::~HttpServer() = default;

Expected<int> HttpServer::bind() {
  if (opt_.port < 0 || opt_.port > 65535) return Status::Error("--port " + std::to_string(opt_.port) + " is not in 0..65535");
  int port = opt_.port;
  if (port == 0) {
    port = svr_->bind_to_any_port(opt_.host);
  } else if (!svr_->bind_to_port(opt_.host, port)) {
    port = -1;
  }
  if (port < 0) return Status::Error("cannot listen on " + opt_.host + ":" + std::to_string(opt_.port) + " (in use, or not an address of this machine)");
  // cpp-httplib 0.11 listens with a backlog of 5: 64 clients connecting at
  // once overflowed it and a few connections were reset before their request
  // was read (loadgen: 4 of 6400 "transport: Read"). Listening again on the
  // bound socket raises the backlog.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return port;
}

void HttpServer::serve() { svr_->listen_after_bind(); }
void HttpServer::stop() { svr_->stop(); }

void HttpServer::routes() {
  httplib::Server& s = *svr_;
  // A worker per waiting or running request and some spare: handlers block
  // while their request is generated.
  const size_t workers = static_cast<size_t>(engine_.slots().size()) + 80;
  s.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  s.set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = static_cast<int>(sock);
  });
  s.set_payload_max_length(opt_.max_body);
  s.set_read_timeout(30, 0);
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opt_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + opt_.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, "invalid or missing API key: send 'Authorization: Bearer KEY'", {}, "authentication_error");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return send_error(res, 404, "no endpoint " + req.method + " " + req.path, {}, "not_found_error");
    if (res.status == 413) return send_error(res, 413, "the request body is larger than the server accepts");
    send_error(res, res.status, "request failed (HTTP " + std::to_string(res.status) + ")", {}, "server_error");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, what, {}, "server_error");
  });

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    const ModelConfig& c = model_.config();
    res.set_content(models_json(opt_.model_id, std::time(nullptr), c.n_ctx_train, c.n_vocab,
                                static_cast<int64_t>(model_.weight_bytes())),
                    "application/json");
  };
  s.Get("/v1/models", models);
  s.Get("/models", models);
  s.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    json j;
    j["model_path"] = opt_.model_id;
    const auto slots = engine_.slots();
    j["total_slots"] = slots.size();
    j["chat_template"] = opt_.chat_template.name;
    j["chat_template_fallback"] = opt_.chat_template.fallback;
    if (!opt_.chat_template.note.empty()) j["warning"] = opt_.chat_template.note;
    j["default_generation_settings"] = {{"n_ctx", slots.empty() ? 0 : slots[0].n_ctx}};
    j["kv_blocks"] = engine_.pool().n_blocks();
    j["kv_block_tokens"] = engine_.tokens_per_block();
    res.set_content(j.dump(), "application/json");
  });

  auto complete = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      CompletionRequest cr;
      if (auto err = parse_completion_request(req.body, chat, cr)) {
        res.status = err->status;
        res.set_content(error_json(*err), "application/json");
        return;
      }
      const Tokenizer& tok = model_.tokenizer();
      GenRequest g;
      if (chat) {
        if (Status v = validate_chat(cr.messages); !v.ok()) return send_error(res, 400, v.message(), "messages");
        const std::string bos = tok.bos() >= 0 ? tok.piece(tok.bos()) : "", eos = tok.eos() >= 0 ? tok.piece(tok.eos()) : "";
        const std::string text = render_chat(opt_.chat_template, cr.messages, bos, eos, true);
        g.prompt = tok.encode(text, !template_writes_bos(opt_.chat_template), true);
        for (const std::string& t : end_of_turn_texts(opt_.chat_template)) {
          const auto ids = tok.encode(t, false, true);
          if (ids.size() == 1 && tok.is_control(ids[0])) g.end_tokens.push_back(ids[0]);
        }
      } else if (cr.prompt_is_tokens) {
        g.prompt = cr.prompt_tokens;
      } else {
        g.prompt = tok.encode(cr.prompt, true, true);
      }
      if (tok.eos() >= 0) g.end_tokens.push_back(tok.eos());
      g.sampling = sampler_options(cr.sampling, std::random_device{}());
      g.max_tokens = cr.sampling.max_tokens;
      g.stop = cr.sampling.stop;
      Engine::Refusal why{500, ""};
      std::shared_ptr<Task> task = engine_.submit(std::move(g), &why);
      if (!task) {
        if (why.status == 503) res.set_header("Retry-After", "1");
        return send_error(res, why.status, why.message, why.status == 400 ? "prompt" : "",
                          why.status == 503 ? "server_busy" : "invalid_request_error");
      }
      const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
      const int64_t created = std::time(nullptr);
      const std::string model_id = cr.model.empty() ? opt_.model_id : cr.model;
      if (!cr.stream) {
        std::string text, piece;
        while (task->next(piece)) text += piece;
        if (task->finish_reason == "error") return send_error(res, 500, task->error, {}, "server_error");
        res.set_content(completion_json(id, created, model_id, text, task->finish_reason, task->prompt_tokens,
                                        task->completion_tokens, chat),
                        "application/json");
        return;
      }
      const bool usage = cr.include_usage;
      auto first = std::make_shared<bool>(true);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [task, id, created, model_id, chat, usage, first](size_t, httplib::DataSink& sink) {
            std::string piece;
            while (task->next(piece)) {
              if (piece.empty()) continue;
              const std::string event = sse(chunk_json(id, created, model_id, piece, "", chat, *first));
              if (!sink.write(event.data(), event.size())) {
                task->cancelled = true;  // the client has gone: free its blocks
                return false;
              }
              *first = false;
            }
            std::string tail;
            if (task->finish_reason == "error") {
              ApiError e;
              e.status = 500;
              e.message = task->error;
              e.type = "server_error";
              tail = sse(error_json(e));
            } else {
              tail = sse(chunk_json(id, created, model_id, "", task->finish_reason, chat, *first));
              if (usage)
                tail += sse(usage_chunk_json(id, created, model_id, task->prompt_tokens, task->completion_tokens, chat));
            }
            tail += sse_done();
            if (!sink.write(tail.data(), tail.size())) return false;
            sink.done();
            return true;
          },
          [task](bool) {
            if (!task->done) task->cancelled = true;
          });
    };
  };
  s.Post("/v1/completions", complete(false));
  s.Post("/completions", complete(false));
  s.Post("/v1/chat/completions", complete(true));
  s.Post("/chat/completions", complete(true));

  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    TokenizeRequest tr;
    if (auto err = parse_tokenize_request(req.body, tr)) {
      res.status = err->status;
      return res.set_content(error_json(*err), "application/json");
    }
    const Tokenizer& tok = model_.tokenizer();
    const auto ids = tok.encode(tr.content, tr.add_special, true);
    std::vector<std::string> pieces;
    for (int32_t i : ids) pieces.push_back(tok.piece(i));
    res.set_content(tokenize_json(ids, tr.with_pieces ? &pieces : nullptr), "application/json");
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    std::vector<int32_t> ids;
    if (auto err = parse_detokenize_request(req.body, ids, model_.tokenizer().n_vocab())) {
      res.status = err->status;
      return res.set_content(error_json(*err), "application/json");
    }
    res.set_content(detokenize_json(model_.tokenizer().decode(ids)), "application/json");
  });

  s.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    json a = json::array();
    for (const SlotInfo& i : engine_.slots())
      a.push_back({{"id", i.id}, {"is_processing", i.processing}, {"n_ctx", i.n_ctx}, {"n_prompt_tokens", i.n_prompt},
                   {"n_prompt_tokens_cached", i.n_cached}, {"n_decoded", i.n_decoded}, {"n_tokens", i.n_tokens}});
    res.set_content(a.dump(), "application/json");
  });
  s.Post(R"(/slots/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string action = req.get_param_value("action");
    if (action != "save" && action != "restore")
      return send_error(res, 400, "'action' must be save or restore", "action");
    if (opt_.slot_save_path.empty())
      return send_error(res, 501, "slot files are disabled: start the server with --slot-save-path DIR", {},
                        "not_supported_error");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception&) {
      return send_error(res, 400, "the request body is not valid JSON", "filename");
    }
    if (!body.is_object() || !body.contains("filename") || !body["filename"].is_string())
      return send_error(res, 400, "'filename' must be a string", "filename");
    const std::string file = body["filename"].get<std::string>();
    if (!safe_file_name(file))
      return send_error(res, 400, "'filename' must be a plain file name (no '/', not '.' or '..')", "filename");
    int id = -1;
    try {
      id = std::stoi(req.matches[1].str());
    } catch (const std::exception&) {
      return send_error(res, 400, "slot id out of range", "id_slot");
    }
    const std::string path = opt_.slot_save_path + "/" + file;
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    const Status st = action == "save" ? engine_.save_slot(id, path, &n) : engine_.restore_slot(id, path, &n);
    if (!st.ok()) return send_error(res, 400, st.message(), "id_slot");
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    json j = {{"id_slot", id}, {"filename", file}};
    j[action == "save" ? "n_saved" : "n_restored"] = n;
    j["timings"] = {{action == "save" ? "save_ms" : "restore_ms", ms}};
    res.set_content(j.dump(), "application/json");
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const EngineMetrics m = engine_.metrics();
    std::ostringstream o;
    metric(o, "requests_running", "gauge", "Requests being generated.", m.running);
    metric(o, "requests_queued", "gauge", "Requests waiting for a slot or KV blocks.", m.queued);
    metric(o, "requests_running_peak", "gauge", "The most requests generated at once.", m.peak_running);
    metric(o, "requests_total", "counter", "Requests accepted.", double(m.requests));
    metric(o, "requests_rejected_total", "counter", "Requests refused (bad prompt, queue full).", double(m.rejected));
    metric(o, "requests_cancelled_total", "counter", "Requests whose client went away.", double(m.cancelled));
    metric(o, "prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", double(m.prompt_tokens));
    metric(o, "prompt_tokens_evaluated_total", "counter", "Prompt tokens run through the model.", double(m.prompt_evaluated));
    metric(o, "prefix_cache_hit_tokens_total", "counter", "Prompt tokens taken from shared cached blocks.",
           double(m.prefix_hit_tokens));
    metric(o, "prefix_cache_hits_total", "counter", "Cached blocks shared by new requests.", double(m.pool.prefix_hits));
    metric(o, "prefix_cache_lookups_total", "counter", "Prefix-cache lookups.", double(m.pool.prefix_lookups));
    metric(o, "tokens_generated_total", "counter", "Tokens generated.", double(m.generated));
    metric(o, "prompt_tokens_seconds", "gauge", "Prompt tokens per second of model time.",
           m.prompt_seconds > 0 ? m.prompt_evaluated / m.prompt_seconds : 0.0);
    metric(o, "predicted_tokens_seconds", "gauge", "Generated tokens per second of model time.",
           m.gen_seconds > 0 ? m.generated / m.gen_seconds : 0.0);
    metric(o, "kv_blocks_total", "gauge", "KV blocks in the pool.", double(m.pool.n_blocks));
    metric(o, "kv_blocks_used", "gauge", "KV blocks held by sequences (running or kept by idle slots).",
           double(m.pool.in_use));
    metric(o, "kv_blocks_idle_slots", "gauge", "KV blocks kept by idle slots (freed under pressure).",
           double(m.idle_slot_blocks));
    metric(o, "kv_blocks_cached", "gauge", "Unreferenced KV blocks kept for prefix reuse.", double(m.pool.cached));
    metric(o, "kv_blocks_free", "gauge", "KV blocks never used or released.", double(m.pool.free));
    metric(o, "kv_bytes_used", "gauge", "Bytes of the KV blocks in use.", double(m.pool.in_use) * double(m.block_bytes));
    metric(o, "kv_budget_bytes", "gauge", "The KV memory budget.", double(m.budget));
    metric(o, "kv_pool_bytes", "gauge", "Bytes of the KV block pool.", double(m.pool.n_blocks) * double(m.block_bytes));
    res.set_content(o.str(), "text/plain; version=0.0.4");
  });
}

}  // namespace tkv::server
