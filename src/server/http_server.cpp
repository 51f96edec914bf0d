#include "server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/http_request.h"
#include "text/text_stream.h"
#include "server/openai_api.h"

namespace tkv::server {

using Clock = std::chrono::steady_clock;

struct HttpServer::Conn {
  int fd = -1;
  std::string addr;
  int port = 0;
  HttpRequestParser parser;
  Clock::time_point deadline;
  bool started = false;  // a byte of the current request has arrived
  bool linger = false;   // an error was sent: reading and dropping what the client still sends, then close
  size_t lingered = 0;
  size_t counted = 0;  // bytes of this connection in the reader's buffered total
  int served = 0;
  ~Conn() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

using json = nlohmann::json;

// The connection a worker is serving: handlers ask it whether the client is
// still there.
thread_local int t_client_fd = -1;

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

const char* reason_phrase(int s) {
  switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

// The client of fd is still there: no hang-up, no error, and not at end of
// stream (bytes waiting are a pipelined request: still there).
bool client_alive(int fd) {
  if (fd < 0) return true;
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return false;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

// Writes all of data to a non-blocking socket; false when the client is gone
// or made no progress for timeout_ms.
bool send_all(int fd, const char* data, size_t n, int timeout_ms) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, timeout_ms);
    if (r <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
  }
  return true;
}

// A whole small response, for the reader thread: one non-blocking send,
// whatever fits (the client is being refused or closed anyway).
std::string simple_response(int status, const std::string& message, const std::string& type, bool retry_after = false) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.type = type;
  const std::string body = error_json(e);
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                  "\r\nContent-Type: application/json\r\nConnection: close\r\n";
  if (retry_after) r += "Retry-After: 1\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  return r;
}

void send_now(int fd, const std::string& s) { (void)::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT); }

bool ieq_prefix(const std::string& s, const char* prefix) {
  const size_t n = std::strlen(prefix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return false;
  return true;
}

// Compares the key a client sent with ours in time that depends only on our
// key's length, not on where they differ.
bool key_matches(const std::string& sent, const std::string& key) {
  volatile unsigned char diff = sent.size() != key.size();
  for (size_t i = 0; i < key.size(); ++i)
    diff = diff | static_cast<unsigned char>((i < sent.size() ? sent[i] : 0) ^ key[i]);
  return diff == 0;
}

bool authorized(const httplib::Request& req, const std::string& key) {
  std::string a = req.get_header_value("Authorization");
  if (ieq_prefix(a, "bearer ")) {
    a.erase(0, 7);
    while (!a.empty() && a.front() == ' ') a.erase(0, 1);
    if (key_matches(a, key)) return true;
  }
  if (req.has_header("X-Api-Key") && key_matches(req.get_header_value("X-Api-Key"), key)) return true;
  return false;
}

// The error text of a slot file operation without any server path: the
// directory is cut out of it.
std::string scrub_path(std::string msg, const std::string& dir) {
  if (dir.empty()) return msg;
  for (const std::string& d : {dir + "/", dir}) {
    size_t at;
    while ((at = msg.find(d)) != std::string::npos) msg.erase(at, d.size());
  }
  return msg;
}

}  // namespace

HttpServer::HttpServer(const Model& model, Engine& engine, HttpOptions opt)
    : model_(model), engine_(engine), opt_(std::move(opt)) {
  if (opt_.max_buffered == 0) opt_.max_buffered = 4 * opt_.max_body;
  if (opt_.max_buffered < opt_.max_body) opt_.max_buffered = opt_.max_body;
  const Tokenizer& tok = model_.tokenizer();
  for (int32_t i = 0; i < tok.n_vocab(); ++i) max_piece_ = std::max(max_piece_, tok.piece(i).size());
  routes();
}

HttpServer::~HttpServer() {
  stop();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

int HttpServer::connections() const {
  std::lock_guard<std::mutex> g(mu_);
  return open_;
}

// A prompt of more bytes than this has more tokens than the context holds:
// every token covers at most max_piece_ bytes of text.
size_t HttpServer::max_prompt_bytes() const {
  int ctx = 0;
  for (const SlotInfo& s : engine_.slots()) ctx = std::max(ctx, s.n_ctx);
  return (static_cast<size_t>(ctx) + 1) * max_piece_;
}

Expected<int> HttpServer::bind() {
  if (opt_.port < 0 || opt_.port > 65535) return Status::Error("--port " + std::to_string(opt_.port) + " is not in 0..65535");
  const std::string where = opt_.host + ":" + std::to_string(opt_.port);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  if (::getaddrinfo(opt_.host.c_str(), std::to_string(opt_.port).c_str(), &hints, &res) != 0 || !res)
    return Status::Error("cannot listen on " + where + " (in use, or not an address of this machine)");
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return Status::Error("cannot listen on " + where + " (in use, or not an address of this machine)");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  listen_fd_ = fd;
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  // Temporary files of a save that was killed (NAME.tmp.PID[.RANDOM]) are never completed: removed.
  if (!opt_.slot_save_path.empty()) {
    if (DIR* d = ::opendir(opt_.slot_save_path.c_str())) {
      const int dfd = ::dirfd(d);
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        const size_t t = n.rfind(".tmp.");
        if (t == std::string::npos || t == 0) continue;
        const std::string rest = n.substr(t + 5);
        if (rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0]))) continue;
        struct stat st{};
        if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)))
          ::unlinkat(dfd, e->d_name, 0);
      }
      ::closedir(d);
    }
  }
  return port;
}

void HttpServer::stop() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  cv_.notify_all();
}

void HttpServer::release(std::unique_ptr<Conn> c) {
  if (!c) return;
  std::lock_guard<std::mutex> g(mu_);
  --open_;
  auto it = per_client_.find(c->addr);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  c.reset();  // closes
}

void HttpServer::serve() {
  if (listen_fd_ < 0) return;
  int n_workers = opt_.workers;
  if (n_workers <= 0) n_workers = static_cast<int>(engine_.slots().size()) + engine_.queue_limit() + 8;
  n_workers = std::clamp(n_workers, 1, 1024);
  for (int i = 0; i < n_workers; ++i) workers_.emplace_back([this] { worker(); });

  const HttpLimits lim{opt_.max_head_bytes, opt_.max_headers, opt_.max_body};
  std::map<int, std::unique_ptr<Conn>> conns;  // being read (or idle between requests)
  size_t buffered = 0;                         // bytes their parsers hold
  std::vector<char> buf(64 << 10);
  std::vector<pollfd> fds;
  auto fresh = [&](Conn& c) {
    c.parser = HttpRequestParser(lim);
    c.started = false;
    c.deadline = Clock::now() + std::chrono::milliseconds(opt_.idle_timeout_ms);
  };
  // Sends a short error, then drops what the client still sends for up to a
  // second (so that it can read the answer) before closing.
  auto refuse = [&](Conn& c, int status, const std::string& msg, const std::string& type) {
    send_now(c.fd, simple_response(status, msg, type, status == 503));
    ::shutdown(c.fd, SHUT_WR);
    buffered -= c.counted;
    const bool big = c.counted > (1u << 20);
    c.counted = 0;
    c.parser = HttpRequestParser(lim);
    if (big) ::malloc_trim(0);  // what the refused body held goes back to the system
    c.linger = true;
    c.deadline = Clock::now() + std::chrono::seconds(1);
  };
  while (!stopping_) {
    {  // kept-alive connections handed back by workers
      std::lock_guard<std::mutex> g(mu_);
      for (auto& c : returned_) {
        fresh(*c);
        conns[c->fd] = std::move(c);
      }
      returned_.clear();
    }
    fds.clear();
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    auto now = Clock::now();
    int timeout = 1000;
    for (auto& [fd, c] : conns) {
      fds.push_back({fd, POLLIN, 0});
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c->deadline - now).count();
      timeout = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, timeout));
    }
    const int r = ::poll(fds.data(), fds.size(), timeout);
    if (r < 0 && errno != EINTR) break;
    if (stopping_) break;
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof v);
    }
    now = Clock::now();
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      bool close_it = false;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          close_it = true;
        } else if (n > 0 && c.linger) {
          c.lingered += static_cast<size_t>(n);
          if (c.lingered > (4u << 20)) close_it = true;
        } else if (n > 0) {
          if (!c.started) {
            c.started = true;
            c.deadline = now + std::chrono::milliseconds(opt_.request_timeout_ms);
          }
          const bool head_before = c.parser.head_complete();
          c.parser.feed(buf.data(), static_cast<size_t>(n));
          const size_t held = c.parser.held_bytes();
          buffered = buffered - c.counted + held;
          c.counted = held;
          if (c.parser.failed()) {
            refuse(c, c.parser.error_status(), c.parser.error(), "invalid_request_error");
          } else if (!c.parser.done() && buffered > opt_.max_buffered) {
            refuse(c, 503, "the server is busy: too many large request bodies are being received", "server_busy");
          } else if (!head_before && c.parser.head_complete() && !c.parser.done() &&
                     c.parser.request().expect_continue) {
            send_now(fd, "HTTP/1.1 100 Continue\r\n\r\n");
          }
          if (!c.linger && c.parser.done()) {
            buffered -= c.counted;
            c.counted = 0;
            std::unique_ptr<Conn> job = std::move(it->second);
            conns.erase(it);
            std::unique_lock<std::mutex> g(mu_);
            if (jobs_.size() >= workers_.size()) {  // every worker busy and as many waiting
              g.unlock();
              send_now(fd, simple_response(503, "the server is busy: every request handler is taken", "server_busy", true));
              release(std::move(job));
            } else {
              busy_fds_.insert(fd);
              jobs_.push_back(std::move(job));
              g.unlock();
              cv_.notify_one();
            }
            continue;
          }
        }
      }
      if (!close_it && now >= c.deadline) {
        if (c.linger || !c.started) close_it = true;
        else refuse(c, 408, "the request did not arrive within " + std::to_string(opt_.request_timeout_ms) + " ms", "invalid_request_error");
      }
      if (close_it) {
        buffered -= c.counted;
        const bool big = c.counted > (1u << 20);
        std::unique_ptr<Conn> gone = std::move(it->second);
        conns.erase(it);
        release(std::move(gone));
        if (big) ::malloc_trim(0);
      }
    }
    if (fds[0].revents & POLLIN) {
      for (int k = 0; k < 64; ++k) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        char host[INET6_ADDRSTRLEN] = "";
        int port = 0;
        if (ss.ss_family == AF_INET6) {
          auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
          ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
          port = ntohs(a->sin6_port);
        } else {
          auto* a = reinterpret_cast<sockaddr_in*>(&ss);
          ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
          port = ntohs(a->sin_port);
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (opt_.send_buffer_bytes > 0)
          ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &opt_.send_buffer_bytes, sizeof opt_.send_buffer_bytes);
        std::unique_lock<std::mutex> g(mu_);
        int& mine = per_client_[host];
        if (open_ >= opt_.max_connections || mine >= opt_.max_connections_per_client) {
          if (mine == 0) per_client_.erase(host);
          g.unlock();
          send_now(fd, simple_response(503,
                                       open_ >= opt_.max_connections
                                           ? "the server is busy: " + std::to_string(opt_.max_connections) + " connections are open (--max-connections)"
                                           : "too many connections from this address (--max-connections-per-client " +
                                                 std::to_string(opt_.max_connections_per_client) + ")",
                                       "server_busy", true));
          ::close(fd);
          continue;
        }
        ++mine;
        ++open_;
        g.unlock();
        auto c = std::make_unique<Conn>();
        c->fd = fd;
        c->addr = host;
        c->port = port;
        fresh(*c);
        conns[fd] = std::move(c);
      }
    }
  }
  // Stopping: no new connection; those being read or idle are closed now.
  ::close(listen_fd_);
  listen_fd_ = -1;
  for (auto& [fd, c] : conns) release(std::move(c));
  conns.clear();
  {
    std::unique_lock<std::mutex> g(mu_);
    for (auto& c : jobs_) {  // complete requests no worker has taken: refused
      busy_fds_.erase(c->fd);
      send_now(c->fd, simple_response(503, "the server is shutting down", "server_busy"));
    }
    std::deque<std::unique_ptr<Conn>> left;
    left.swap(jobs_);
    for (auto& c : returned_) left.push_back(std::move(c));
    returned_.clear();
    g.unlock();
    for (auto& c : left) release(std::move(c));
    g.lock();
    // Responses in progress get half a second to end, then their sockets are shut.
    idle_cv_.wait_for(g, std::chrono::milliseconds(500), [&] { return active_ == 0; });
    for (int fd : busy_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> g(mu_);
  for (auto& c : returned_) {
    --open_;
    c.reset();
  }
  returned_.clear();
}

void HttpServer::worker() {
  for (;;) {
    std::unique_ptr<Conn> c;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      c = std::move(jobs_.front());
      jobs_.pop_front();
      ++active_;
    }
    const bool big = c->parser.request().body.size() > (1u << 20);
    handle(*c);
    // A pipelined request already read is not served: the connection closes.
    const bool keep = c->parser.take_leftover().empty() && c->parser.request().keep_alive && !stopping_ && client_alive(c->fd) && c->fd >= 0 &&
                      ++c->served < 1000;
    c->parser = HttpRequestParser();
    if (big) ::malloc_trim(0);  // a large body's memory goes back to the system
    std::unique_lock<std::mutex> g(mu_);
    busy_fds_.erase(c->fd);
    --active_;
    if (keep && !stopping_) {
      returned_.push_back(std::move(c));
      g.unlock();
      const uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof one);
    } else {
      g.unlock();
      release(std::move(c));
    }
    idle_cv_.notify_all();
  }
}

void HttpServer::handle(Conn& c) {
  ParsedRequest& p = c.parser.request();
  httplib::Request req;
  req.method = p.method;
  req.path = url_decode(p.path);
  req.target = p.target;
  req.version = p.version;
  req.remote_addr = c.addr;
  req.remote_port = c.port;
  for (auto& [k, v] : p.headers) req.headers.emplace(k, v);
  for (auto& [k, v] : parse_query(p.query)) req.params.emplace(k, v);
  req.body = std::move(p.body);
  p.body = std::string();
  httplib::Response res;
  t_client_fd = c.fd;
  dispatch(req, res);
  t_client_fd = -1;
  if (res.status < 0) res.status = 200;
  const bool chunked = res.is_chunked_content_provider_ && res.content_provider_;
  bool keep = p.keep_alive && !stopping_;
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + reason_phrase(res.status) + "\r\n";
  for (const auto& [k, v] : res.headers) {
    if (k.find_first_of("\r\n") != std::string::npos || v.find_first_of("\r\n") != std::string::npos) continue;
    head += k + ": " + v + "\r\n";
  }
  head += chunked ? "Transfer-Encoding: chunked\r\n" : "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  head += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  const int tmo = opt_.write_timeout_ms;
  if (!chunked) {
    if (res.body.size() < (64u << 10)) {
      head += res.body;
      if (!send_all(c.fd, head.data(), head.size(), tmo)) p.keep_alive = false;
    } else if (!send_all(c.fd, head.data(), head.size(), tmo) || !send_all(c.fd, res.body.data(), res.body.size(), tmo)) {
      p.keep_alive = false;
    }
    if (!keep) p.keep_alive = false;
    return;
  }
  if (!send_all(c.fd, head.data(), head.size(), tmo)) {
    p.keep_alive = false;
    return;  // the releaser (Response's destructor) cancels the task
  }
  bool ok = true, done = false;
  const int fd = c.fd;
  httplib::DataSink sink;
  sink.write = [&](const char* d, size_t n) {
    if (!ok) return false;
    if (n == 0) return true;
    char hex[24];
    const int h = std::snprintf(hex, sizeof hex, "%zx\r\n", n);
    std::string frame(hex, static_cast<size_t>(h));
    frame.append(d, n);
    frame += "\r\n";
    ok = send_all(fd, frame.data(), frame.size(), tmo);
    return ok;
  };
  sink.done = [&] {
    if (done) return;
    done = true;
    if (ok) ok = send_all(fd, "0\r\n\r\n", 5, tmo);
  };
  sink.is_writable = [&] { return ok && client_alive(fd); };
  size_t offset = 0;
  while (ok && !done) {
    if (!res.content_provider_(offset, 0, sink)) {
      ok = false;
      break;
    }
  }
  res.content_provider_success_ = ok && done;
  if (!res.content_provider_success_ || !keep) p.keep_alive = false;
}

void HttpServer::route(const std::string& method, const std::string& path, Handler h) {
  routes_[method + " " + path] = std::move(h);
}

void HttpServer::dispatch(httplib::Request& req, httplib::Response& res) {
  try {
    if (!opt_.api_key.empty() && req.path != "/health" && !authorized(req, opt_.api_key))
      return send_error(res, 401, "invalid or missing API key: send 'Authorization: Bearer KEY'", {}, "authentication_error");
    auto it = routes_.find(req.method + " " + req.path);
    if (it != routes_.end()) return it->second(req, res);
    if (req.method == "POST" && req.path.rfind("/slots/", 0) == 0) return slot_action_(req, res);
    std::string p = req.path.substr(0, 200);
    return send_error(res, 404, "no endpoint " + req.method.substr(0, 20) + " " + p, {}, "not_found_error");
  } catch (const std::bad_alloc&) {
    res = httplib::Response();
    send_error(res, 503, "the server is out of memory for this request", {}, "server_error");
  } catch (const std::exception& e) {
    res = httplib::Response();
    send_error(res, 500, e.what(), {}, "server_error");
  } catch (...) {
    res = httplib::Response();
    send_error(res, 500, "internal error", {}, "server_error");
  }
}

void HttpServer::routes() {
  // Always 200 while the server serves (a load balancer's check): the
  // shared store's state is reported, never a reason to fail.
  route("GET", "/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!opt_.kv_store) return res.set_content(R"({"status":"ok"})", "application/json");
    res.set_content(json{{"status", "ok"}, {"kv_store", opt_.kv_store->state()}}.dump(), "application/json");
  });
  auto models = [this](const httplib::Request&, httplib::Response& res) {
    const ModelConfig& c = model_.config();
    res.set_content(models_json(opt_.model_id, std::time(nullptr), c.n_ctx_train, c.n_vocab,
                                static_cast<int64_t>(model_.weight_bytes())),
                    "application/json");
  };
  route("GET", "/v1/models", models);
  route("GET", "/models", models);
  route("GET", "/props", [this](const httplib::Request&, httplib::Response& res) {
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
      if (auto err = parse_completion_request(req.body, chat, cr, opt_.json_depth)) {
        res.status = err->status;
        res.set_content(error_json(*err), "application/json");
        return;
      }
      const Tokenizer& tok = model_.tokenizer();
      const int ctx = engine_.slots().empty() ? 0 : engine_.slots()[0].n_ctx;
      // A prompt longer than this cannot fit the context whatever it holds:
      // refused before it is tokenized.
      const size_t max_bytes = max_prompt_bytes();
      auto too_long = [&](size_t bytes) {
        send_error(res, 400,
                   "the prompt has " + std::to_string(bytes) + " bytes, more than " + std::to_string(ctx) +
                       " tokens can hold; the context holds " + std::to_string(ctx) + " tokens (prompt and generated tokens together)",
                   chat ? "messages" : "prompt");
      };
      GenRequest g;
      if (chat) {
        if (Status v = validate_chat(opt_.chat_template, cr.messages); !v.ok())
          return send_error(res, 400, v.message(), "messages");
        const std::string bos = tok.bos() >= 0 ? tok.piece(tok.bos()) : "", eos = tok.eos() >= 0 ? tok.piece(tok.eos()) : "";
        size_t bytes = 0;
        for (const ChatMessage& m : cr.messages) bytes += m.content.size();
        if (bytes > max_bytes) return too_long(bytes);
        const std::string text = render_chat(opt_.chat_template, cr.messages, bos, eos, true);
        // The template's own text is tokens too (its special tokens are vocabulary pieces).
        if (text.size() > max_bytes) return too_long(text.size());
        g.prompt = tok.encode(text, !template_writes_bos(opt_.chat_template), true);
        for (const std::string& t : end_of_turn_texts(opt_.chat_template)) {
          const auto ids = tok.encode(t, false, true);
          if (ids.size() == 1 && tok.is_control(ids[0])) g.end_tokens.push_back(ids[0]);
        }
        if (opt_.chat_template.format == ChatFormat::kHarmony) {
          g.harmony = true;
          auto id = [&](const char* text) {
            const auto ids = tok.encode(text, false, true);
            return ids.size() == 1 ? ids[0] : -1;
          };
          g.harmony_ids = {id("<|start|>"), id("<|end|>"), id("<|message|>"), id("<|channel|>"),
                           id("<|return|>"), id("<|call|>"), id("<|constrain|>")};
        }
      } else if (cr.prompt_is_tokens) {
        g.prompt = std::move(cr.prompt_tokens);
      } else {
        if (cr.prompt.size() > max_bytes) return too_long(cr.prompt.size());
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
        return send_error(res, why.status, why.message, why.status == 400 ? why.param : "",
                          why.status == 503 ? "server_busy" : "invalid_request_error");
      }
      const std::string id = new_id(chat ? "chatcmpl" : "cmpl");
      const int64_t created = std::time(nullptr);
      const std::string model_id = cr.model.empty() ? opt_.model_id : cr.model;
      Engine* engine = &engine_;
      if (!cr.stream) {
        std::string text, piece;
        const int fd = t_client_fd;
        auto checked = std::chrono::steady_clock::now();
        for (;;) {
          const Task::Next n = task->next_for(piece, 50);
          if (n == Task::Next::kEnd) break;
          if (n == Task::Next::kText) text += piece;
          // Every 50 ms, text or not: the client has gone? Its request ends, queued or running.
          const auto now = std::chrono::steady_clock::now();
          if (now - checked < std::chrono::milliseconds(50)) continue;
          checked = now;
          if (!client_alive(fd)) {
            engine->cancel(task);
            return;
          }
        }
        if (task->finish_reason == "error") return send_error(res, 500, task->error, {}, "server_error");
        if (task->finish_reason == "cancelled") return send_error(res, 503, "the request was cancelled", {}, "server_error");
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
          [task, id, created, model_id, chat, usage, first, engine](size_t, httplib::DataSink& sink) {
            std::string piece;
            for (;;) {
              const Task::Next n = task->next_for(piece, 50);
              if (n == Task::Next::kEnd) break;
              if (n == Task::Next::kTimeout) {
                // Queued or between tokens: a client that has gone is noticed here too.
                if (sink.is_writable && !sink.is_writable()) {
                  engine->cancel(task);
                  return false;
                }
                continue;
              }
              if (piece.empty()) continue;
              const std::string event = sse(chunk_json(id, created, model_id, piece, "", chat, *first));
              if (!sink.write(event.data(), event.size())) {
                engine->cancel(task);  // the client has gone: free its blocks
                return false;
              }
              *first = false;
            }
            std::string tail;
            if (task->finish_reason == "error" || task->finish_reason == "cancelled") {
              ApiError e;
              e.status = 500;
              e.message = task->finish_reason == "error" ? task->error : "the request was cancelled";
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
          [task, engine](bool) {
            if (!task->done_now()) engine->cancel(task);
          });
    };
  };
  route("POST", "/v1/completions", complete(false));
  route("POST", "/completions", complete(false));
  route("POST", "/v1/chat/completions", complete(true));
  route("POST", "/chat/completions", complete(true));

  route("POST", "/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    TokenizeRequest tr;
    if (auto err = parse_tokenize_request(req.body, tr, opt_.json_depth)) {
      res.status = err->status;
      return res.set_content(error_json(*err), "application/json");
    }
    // Text of any length may be tokenized, up to what a few contexts hold.
    const size_t limit = std::max<size_t>(4 * max_prompt_bytes(), 1u << 20);
    if (tr.content.size() > limit)
      return send_error(res, 400,
                        "'content' has " + std::to_string(tr.content.size()) + " bytes; /tokenize takes at most " +
                            std::to_string(limit),
                        "content");
    const Tokenizer& tok = model_.tokenizer();
    const auto ids = tok.encode(tr.content, tr.add_special, true);
    std::vector<std::string> pieces;
    for (int32_t i : ids) pieces.push_back(tok.piece(i));
    res.set_content(tokenize_json(ids, tr.with_pieces ? &pieces : nullptr), "application/json");
  });
  route("POST", "/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    std::vector<int32_t> ids;
    if (auto err = parse_detokenize_request(req.body, ids, model_.tokenizer().n_vocab(), opt_.json_depth)) {
      res.status = err->status;
      return res.set_content(error_json(*err), "application/json");
    }
    res.set_content(detokenize_json(model_.tokenizer().decode(ids)), "application/json");
  });

  route("GET", "/slots", [this](const httplib::Request&, httplib::Response& res) {
    json a = json::array();
    for (const SlotInfo& i : engine_.slots())
      a.push_back({{"id", i.id}, {"is_processing", i.processing}, {"n_ctx", i.n_ctx}, {"n_prompt_tokens", i.n_prompt},
                   {"n_prompt_tokens_cached", i.n_cached}, {"n_decoded", i.n_decoded}, {"n_tokens", i.n_tokens}});
    res.set_content(a.dump(), "application/json");
  });
  slot_action_ = [this](const httplib::Request& req, httplib::Response& res) {
    const std::string digits = req.path.substr(7);
    if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return send_error(res, 404, "no endpoint POST " + req.path.substr(0, 200), {}, "not_found_error");
    const std::string action = req.get_param_value("action");
    if (action != "save" && action != "restore")
      return send_error(res, 400, "'action' must be save or restore", "action");
    if (opt_.slot_save_path.empty())
      return send_error(res, 501, "slot files are disabled: start the server with --slot-save-path DIR", {},
                        "not_supported_error");
    if (auto e = check_json_depth(req.body, opt_.json_depth)) {
      res.status = e->status;
      return res.set_content(error_json(*e), "application/json");
    }
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
    const int id = std::stoi(digits);
    const auto t0 = std::chrono::steady_clock::now();
    int n = 0;
    const Status st = action == "save" ? engine_.save_slot(id, opt_.slot_save_path, file, &n)
                                       : engine_.restore_slot(id, opt_.slot_save_path, file, &n);
    if (!st.ok()) return send_error(res, 400, scrub_path(st.message(), opt_.slot_save_path), "id_slot");
    const double ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    json j = {{"id_slot", id}, {"filename", utf8_sanitize(file)}};
    j[action == "save" ? "n_saved" : "n_restored"] = n;
    j["timings"] = {{action == "save" ? "save_ms" : "restore_ms", ms}};
    res.set_content(j.dump(), "application/json");
  };
  route("GET", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
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
    if (m.has_store) {
      const kvstore::KvStoreStats& k = m.store;
      metric(o, "kv_store_up", "gauge", "1 when the last store operation reached it.", k.connected ? 1 : 0);
      metric(o, "kv_store_hit_tokens_total", "counter", "Prompt tokens taken from the shared store.", double(m.store_hit_tokens));
      metric(o, "kv_store_blocks_adopted_total", "counter", "Blocks from the store used by requests.",
             double(m.store_blocks_adopted));
      metric(o, "kv_store_lookups_total", "counter", "Store lookups (one round trip each).", double(k.lookups));
      metric(o, "kv_store_hits_total", "counter", "Keys found in the store.", double(k.hits));
      metric(o, "kv_store_misses_total", "counter", "Keys not found (or not fetched: store down, deadline).", double(k.misses));
      metric(o, "kv_store_blocks_read_total", "counter", "Values read from the store.", double(k.blocks_read));
      metric(o, "kv_store_bytes_read_total", "counter", "Bytes of values read from the store.", double(k.bytes_read));
      metric(o, "kv_store_blocks_written_total", "counter", "Blocks written to the store.", double(k.blocks_written));
      metric(o, "kv_store_bytes_written_total", "counter", "Bytes written to the store.", double(k.bytes_written));
      metric(o, "kv_store_errors_total", "counter", "Failed store connections, commands and deadlines.", double(k.errors));
      metric(o, "kv_store_dropped_writes_total", "counter", "Block writes dropped (queue full, store down).",
             double(k.dropped_writes));
      metric(o, "kv_store_invalid_values_total", "counter", "Values ignored (header, checksum, fingerprint, tokens).",
             double(k.invalid_values));
      metric(o, "kv_store_write_queue", "gauge", "Block writes waiting for the writer.", double(k.queued));
      metric(o, "kv_store_lookup_seconds_total", "counter", "Time spent in store lookups.", k.lookup_seconds);
      metric(o, "kv_store_lookup_seconds_max", "gauge", "The longest store lookup.", k.lookup_seconds_max);
    }
    res.set_content(o.str(), "text/plain; version=0.0.4");
  });
}

}  // namespace tkv::server
