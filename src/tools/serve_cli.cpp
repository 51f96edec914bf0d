// `turbokv serve -m MODEL [--host 127.0.0.1] [--port 8080] [-np N] [-c CTX]
// [-b N] [--kv-budget SIZE] [cache flags] [--api-key KEY] [--chat-template NAME]
// [--slot-save-path DIR] [-t THREADS] [--kv-store redis://[:PASSWORD@]HOST:PORT[/DB]
// [--kv-store-prefix NAME] [--kv-store-ttl SECONDS]]`: an OpenAI-compatible server
// (server/http_server.h) over a paged, compressed KV cache shared by
// sequences within a memory budget (server/engine.h). Stops cleanly on
// SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "kvstore/kv_store.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "tools/kv_flags.h"
#include "tools/common_flags.h"
#include "tools/subcommands.h"
#include "util/memory.h"

namespace tkv {

// "8GiB", "512MiB", "4G", "1.5GB", "1048576" (bytes); binary units either way.
Expected<size_t> parse_size(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return Status::Error("'" + s + "' is not a size (e.g. 8GiB, 512MiB)");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (const std::exception&) {
    return Status::Error("'" + s + "' is not a size (e.g. 8GiB, 512MiB)");
  }
  std::string u = s.substr(i);
  for (auto& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mul = 0;
  if (u.empty() || u == "b") mul = 1;
  else if (u == "k" || u == "kb" || u == "kib") mul = 1024.0;
  else if (u == "m" || u == "mb" || u == "mib") mul = 1024.0 * 1024;
  else if (u == "g" || u == "gb" || u == "gib") mul = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tb" || u == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else return Status::Error("'" + s + "': unknown unit '" + s.substr(i) + "' (B, KiB, MiB, GiB, TiB)");
  const double b = v * mul;
  if (!(b >= 1) || b > 1e18) return Status::Error("'" + s + "' is not a usable size");
  return static_cast<size_t>(b);
}

void register_serve(CLI::App& app) {
  struct Opt {
    std::string model, host = "127.0.0.1", api_key, chat_template, slot_path, budget, alias;
    std::string api_key_file, max_body = "16MiB";
    std::string kv_store, kv_store_prefix = "turbokv";
    int kv_store_ttl = 0, kv_store_deadline = 1000, kv_store_queue = 64;
    int port = 8080, np = 4, ctx = 0, batch = 512, threads = 0, queue = 64, step = 1024, block = 256;
    int timeout = 30, idle_timeout = 10, max_conns = 512, max_conns_client = 128, max_headers = 100, workers = 0;
    CacheFlags cache{"tq4", "tq4"};
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server over a shared, paged, compressed KV cache");
  add_model_flag(cmd, o->model);
  cmd->add_option("--host", o->host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "port (0: any free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->np, "sequences generated at once (slots; -np)")->check(CLI::Range(1, 1024));
  cmd->add_option("-c,--ctx-size", o->ctx, "tokens per sequence (0: the model's, at most 4096)")->check(CLI::Range(0, 1 << 22));
  cmd->add_option("-b,--batch-size", o->batch, "prompt tokens per forward pass (as run -b)")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-budget", o->budget, "KV memory for all sequences, e.g. 8GiB (default: half of the available memory)");
  cmd->add_option("--step-tokens", o->step, "tokens per batched step (decode tokens + whole prompt chunks)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--queue", o->queue, "requests that may wait for a slot; more get 503")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--block-size", o->block, "tokens per KV block (a power of two, 16..4096)")->check(CLI::Range(16, 4096));
  add_threads_flag(cmd, o->threads);
  add_cache_flags(cmd, o->cache);
  cmd->add_option("--api-key", o->api_key,
                  "require 'Authorization: Bearer KEY' on every endpoint but /health (visible to other users in the "
                  "process list: prefer --api-key-file or TURBOKV_API_KEY)");
  cmd->add_option("--api-key-file", o->api_key_file, "read the API key from this file (its first line)");
  cmd->add_option("--max-body", o->max_body, "largest request body, Content-Length or chunked (default 16MiB); more gets 413");
  cmd->add_option("--max-headers", o->max_headers, "most header lines in a request (default 100); more gets 431")
      ->check(CLI::Range(8, 10000));
  cmd->add_option("--timeout", o->timeout, "seconds a whole request (head and body) may take to arrive, and a response "
                  "write may stall (default 30)")->check(CLI::Range(1, 3600));
  cmd->add_option("--idle-timeout", o->idle_timeout, "seconds an idle keep-alive connection stays open (default 10)")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--max-connections", o->max_conns, "open connections in all (default 512); more get 503")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--max-connections-per-client", o->max_conns_client,
                  "open connections from one client address (default 128); more get 503")->check(CLI::Range(1, 100000));
  cmd->add_option("--http-threads", o->workers, "request handler threads (default 0: slots + queue + 8)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--chat-template", o->chat_template, "chatml, llama3, llama2, mistral, gemma, phi3, zephyr or harmony (default: from the model)");
  cmd->add_option("--slot-save-path", o->slot_path, "directory for POST /slots/ID?action=save|restore");
  cmd->add_option("-a,--alias", o->alias, "model name reported by /v1/models");
  cmd->add_option("--kv-store", o->kv_store,
                  "share compressed KV blocks with other replicas through Redis: redis://[:PASSWORD@]HOST:PORT[/DB] "
                  "(or $TURBOKV_KV_STORE, which keeps the password out of the process list)");
  cmd->add_option("--kv-store-prefix", o->kv_store_prefix, "namespace of this deployment's keys in the store (default turbokv)");
  cmd->add_option("--kv-store-ttl", o->kv_store_ttl, "seconds a stored block lives (default 0: until Redis evicts it)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--kv-store-deadline", o->kv_store_deadline,
                  "milliseconds a store lookup may take before the prompt is evaluated instead (default 1000)")
      ->check(CLI::Range(1, 600000));
  cmd->add_option("--kv-store-queue", o->kv_store_queue, "block writes that may wait for the store; more are dropped (default 64)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([o]() {
    auto fail = [](const std::string& m) { fail_command("serve", m); };
    // SIGINT/SIGTERM go to one waiting thread (below), not to whichever
    // thread is running: blocked here, before any thread starts.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a dead server
    // Request bodies and their copies (up to --max-body each) come from mmap
    // and go back to the system when freed: glibc's threshold would otherwise
    // rise to 32 MiB after the first large free, and such blocks stayed in the
    // heap (RSS 82 MiB instead of 56 after four 16 MB bodies on ref-5m).
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    {  // every connection is a descriptor: the soft limit raised to the hard one
      rlimit rl{};
      if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
      }
    }

    // The key: --api-key, else --api-key-file, else $TURBOKV_API_KEY.
    // Read before the model loads: a wrong flag fails at once.
    std::string key = o->api_key;
    if (key.empty() && !o->api_key_file.empty()) {
      std::ifstream in(o->api_key_file);
      if (!in) fail("--api-key-file " + o->api_key_file + " cannot be read");
      std::getline(in, key);
      while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t')) key.pop_back();
      if (key.empty()) fail("--api-key-file " + o->api_key_file + ": the first line is empty");
    }
    if (key.empty())
      if (const char* env = std::getenv("TURBOKV_API_KEY"); env && *env) key = env;
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    const Model& model = **m;
    const ModelConfig& c = model.config();
    KvCacheOptions co;
    if (Status s = apply_cache_flags(o->cache, model, co); !s.ok()) fail(s.message());
    server::EngineOptions eo;
    eo.n_parallel = o->np;
    eo.ctx = o->ctx > 0 ? o->ctx : std::min(c.n_ctx_train > 0 ? c.n_ctx_train : 4096, 4096);
    eo.n_batch = o->batch;
    eo.step_tokens = o->step;
    eo.queue_limit = o->queue;
    eo.block_tokens = o->block;
    eo.threads = resolve_threads(o->threads);
    eo.keep_slot_cache = !o->slot_path.empty();
    if (!o->budget.empty()) {
      auto b = parse_size(o->budget);
      if (!b) fail("--kv-budget: " + b.error());
      eo.kv_budget = *b;
    } else {
      eo.kv_budget = static_cast<size_t>(0.5 * double(available_memory()));
    }
    if (!o->slot_path.empty() && !std::filesystem::is_directory(o->slot_path))
      fail("--slot-save-path " + o->slot_path + " is not a directory");
    server::HttpOptions ho;
    ho.host = o->host;
    ho.port = o->port;
    ho.api_key = key;
    {
      auto b = parse_size(o->max_body);
      if (!b || *b > (size_t(1) << 30)) fail("--max-body: " + (b ? std::string("at most 1GiB") : b.error()));
      ho.max_body = *b;
    }
    ho.max_headers = static_cast<size_t>(o->max_headers);
    ho.request_timeout_ms = o->timeout * 1000;
    ho.write_timeout_ms = o->timeout * 1000;
    ho.idle_timeout_ms = o->idle_timeout * 1000;
    ho.max_connections = o->max_conns;
    ho.max_connections_per_client = o->max_conns_client;
    ho.workers = o->workers;
    ho.slot_save_path = o->slot_path;
    ho.model_id = !o->alias.empty() ? o->alias : std::filesystem::path(o->model).filename().string();
    if (!o->chat_template.empty()) {
      auto t = server::chat_template_named(o->chat_template);
      if (!t) fail("--chat-template: " + t.error());
      ho.chat_template = *t;
    } else {
      ho.chat_template = server::detect_chat_template(model.file().get_string_or("tokenizer.chat_template", ""),
                                                      model.file().get_string_or("general.architecture", ""));
    }
    if (ho.chat_template.format == server::ChatFormat::kHarmony) {
      // Harmony's markers must be single control tokens, or the prompt and
      // the final-channel filter would be plain text.
      for (const char* t : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>"}) {
        const auto ids = model.tokenizer().encode(t, false, true);
        if (ids.size() != 1 || !model.tokenizer().is_control(ids[0]))
          fail(std::string("chat template harmony: the vocabulary has no control token ") + t +
               " (gpt-oss's o200k_harmony tokens)");
      }
    }
    std::string store_url = o->kv_store;
    if (store_url.empty())
      if (const char* env = std::getenv("TURBOKV_KV_STORE"); env && *env) store_url = env;
    if (!store_url.empty()) {
      kvstore::KvStoreOptions so;
      so.url = store_url;
      so.prefix = o->kv_store_prefix;
      so.ttl_seconds = o->kv_store_ttl;
      so.lookup_deadline_ms = o->kv_store_deadline;
      so.queue_blocks = o->kv_store_queue;
      auto st = kvstore::KvStore::open(so);
      if (!st) fail(st.error());
      eo.store = std::move(*st);
      ho.kv_store = eo.store;
    }
    auto engine = server::Engine::create(model, co, eo);
    if (!engine) fail(engine.error());
    server::HttpServer http(model, **engine, ho);
    auto port = http.bind();
    if (!port) fail(port.error());

    const auto& pool = (*engine)->pool();
    std::fprintf(stderr, "model: %s (%s, %d layers, %d/%d heads, head dim %d, %.1f MiB weights)\n", ho.model_id.c_str(),
                 c.arch.c_str(), c.n_layer, c.n_head, c.n_head_kv, c.head_dim, model.weight_bytes() / 1048576.0);
    std::fprintf(stderr, "KV cache: K %s, V %s, %.1f bytes/token; budget %.1f MiB = %lld blocks of %d tokens (%.2f MiB each)\n",
                 o->cache.k_label().c_str(), o->cache.v_label().c_str(), double(pool.layout().bytes_per_token()),
                 eo.kv_budget / 1048576.0, static_cast<long long>(pool.n_blocks()), pool.block_tokens(),
                 pool.block_bytes() / 1048576.0);
    std::fprintf(stderr, "context: %d tokens per sequence, %d slots; the budget holds %lld tokens = %lld full contexts\n",
                 eo.ctx, eo.n_parallel, static_cast<long long>(pool.n_blocks()) * pool.block_tokens(),
                 static_cast<long long>((*engine)->contexts_that_fit()));
    std::fprintf(stderr, "chat template: %s%s%s\n", ho.chat_template.name.c_str(),
                 ho.chat_template.note.empty() ? "" : " - warning: ", ho.chat_template.note.c_str());
    std::fprintf(stderr, "listening on http://%s:%d%s\n", o->host.c_str(), *port,
                 ho.api_key.empty() ? "" : " (API key required)");
    if (eo.store)
      std::fprintf(stderr, "kv store: %s, keys %s:kv:*, %s\n", kvstore::redact_store_url(store_url).c_str(),
                   o->kv_store_prefix.c_str(), eo.store->state().c_str());
    std::fflush(stderr);

    std::thread sig([&] {
      int got = 0;
      sigwait(&sigs, &got);
      std::fprintf(stderr, "signal %d: stopping\n", got);
      (*engine)->stop();
      http.stop();
    });
    http.serve();
    // Stopped by a signal (or the socket failed): wake the signal thread if needed.
    pthread_kill(sig.native_handle(), SIGTERM);
    sig.join();
    (*engine)->stop();
    std::fprintf(stderr, "stopped\n");
  });
}

}  // namespace tkv
