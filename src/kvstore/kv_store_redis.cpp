// KvStore over hiredis (kv_store.h): blocking connections with socket
// timeouts, one pipelined round trip per lookup, one writer thread.
#include <hiredis/hiredis.h>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kvstore/kv_store.h"

namespace tkv::kvstore {

namespace {
int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
timeval tv_ms(int64_t ms) {
  ms = std::max<int64_t>(ms, 1);
  return timeval{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
}
constexpr size_t kWrittenKeys = 1 << 16;  // keys remembered as written

// The replies of pipelined GETs read straight from the socket (whose
// SO_RCVTIMEO hiredis set): a bulk string is received into its final
// buffer in large reads, one copy from the kernel (hiredis's reader would
// read it 16 KiB at a time into its own buffer, then copy it into a reply,
// and the caller copy it again: a third of redis-benchmark's rate).
class RawReplies {
 public:
  RawReplies(int fd, size_t max_value) : fd_(fd), max_(max_value), buf_(1 << 16) {}
  bool too_big = false;  // the last value was longer than max_value (skipped)
  // One reply: true with `out` the value (empty for nil); false with `error`.
  bool get(std::string& out, std::string& error) {
    std::string line;
    if (!read_line(line, error)) return false;
    if (line.empty()) return fail("empty reply line", error);
    if (line[0] == '-') return fail("GET: " + line.substr(1), error);
    if (line[0] != '$') return fail("GET: unexpected reply", error);
    char* end = nullptr;
    const long long n = std::strtoll(line.c_str() + 1, &end, 10);
    if (end == line.c_str() + 1 || *end != 0 || n < -1) return fail("GET: bad bulk length", error);
    out.clear();
    too_big = false;
    if (n < 0) return true;
    // Never an allocation sized by the store beyond what a block can be: a
    // longer value is read past (an invalid value, not an error).
    if (n > static_cast<long long>(max_)) {
      too_big = true;
      for (long long left = n + 2; left > 0;) {
        if (pos_ == len_) {
          pos_ = len_ = 0;
          const ssize_t r = ::recv(fd_, buf_.data(), buf_.size(), 0);
          if (r <= 0) return fail(r == 0 ? "connection closed" : std::strerror(errno), error);
          len_ = static_cast<size_t>(r);
        }
        const size_t take = static_cast<size_t>(std::min<long long>(left, static_cast<long long>(len_ - pos_)));
        pos_ += take;
        left -= static_cast<long long>(take);
      }
      return true;
    }
    out.resize(static_cast<size_t>(n));
    size_t have = std::min(static_cast<size_t>(n), len_ - pos_);
    std::memcpy(out.data(), buf_.data() + pos_, have);
    pos_ += have;
    while (have < static_cast<size_t>(n)) {  // the rest straight into the value
      const ssize_t r = ::recv(fd_, out.data() + have, static_cast<size_t>(n) - have, 0);
      if (r <= 0) return fail(r == 0 ? "connection closed" : std::strerror(errno), error);
      have += static_cast<size_t>(r);
    }
    std::string crlf;
    if (!read_line(crlf, error)) return false;
    return crlf.empty() ? true : fail("GET: bad bulk terminator", error);
  }

 private:
  static bool fail(const std::string& why, std::string& error) {
    error = why;
    return false;
  }
  bool read_line(std::string& line, std::string& error) {
    for (;;) {
      for (size_t i = pos_; i + 1 < len_; ++i)
        if (buf_[i] == '\r' && buf_[i + 1] == '\n') {
          line.assign(buf_.data() + pos_, i - pos_);
          pos_ = i + 2;
          return true;
        }
      if (len_ - pos_ > 4096) return fail("reply line too long", error);
      if (pos_ > 0) {
        std::memmove(buf_.data(), buf_.data() + pos_, len_ - pos_);
        len_ -= pos_;
        pos_ = 0;
      }
      const ssize_t r = ::recv(fd_, buf_.data() + len_, buf_.size() - len_, 0);
      if (r <= 0) return fail(r == 0 ? "connection closed" : std::strerror(errno), error);
      len_ += static_cast<size_t>(r);
    }
  }
  int fd_;
  size_t max_;
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
};
}  // namespace

struct KvStore::Conn {
  redisContext* c = nullptr;
  ~Conn() {
    if (c) redisFree(c);
  }
  std::string error() const { return c && c->err ? std::string(c->errstr) : std::string("no connection"); }
};

Expected<std::unique_ptr<KvStore>> KvStore::open(const KvStoreOptions& o) {
  auto u = parse_store_url(o.url);
  if (!u) return u.status();
  if (o.prefix.empty() || o.prefix.find_first_of(" \r\n\t") != std::string::npos)
    return Status::Error("--kv-store-prefix must be a non-empty name without spaces");
  if (o.ttl_seconds < 0) return Status::Error("--kv-store-ttl must be >= 0 seconds");
  auto s = std::unique_ptr<KvStore>(new KvStore());
  s->opt_ = o;
  s->url_ = *u;
  s->opt_.read_connections = std::max(1, o.read_connections);
  s->writer_ = std::thread([p = s.get()] { p->writer(); });
  return s;
}

KvStore::~KvStore() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string KvStore::key(uint64_t hash) const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return opt_.prefix + ":kv:" + hex;
}

bool KvStore::backing_off() const { return now_us() < retry_at_us_; }

void KvStore::failed(const std::string& why) {
  ++s_.errors;
  if (s_.connected || last_error_ != why)
    std::fprintf(stderr, "kv store %s: %s (serving without it; retrying)\n", redact_store_url(opt_.url).c_str(), why.c_str());
  s_.connected = false;
  last_error_ = why;
  backoff_ms_ = backoff_ms_ == 0 ? 100 : std::min(backoff_ms_ * 2, 5000);
  retry_at_us_ = now_us() + int64_t(backoff_ms_) * 1000;
  written_.clear();  // the store may have restarted empty
  open_conns_ -= static_cast<int>(idle_conns_.size());  // the others were made before the failure too
  idle_conns_.clear();
}

void KvStore::succeeded() {
  if (!s_.connected && !last_error_.empty())
    std::fprintf(stderr, "kv store %s: connected\n", redact_store_url(opt_.url).c_str());
  s_.connected = true;
  backoff_ms_ = 0;
  retry_at_us_ = 0;
}

// A new connection, authenticated and on its database; null on failure
// (the reason in last_error_ via failed(), called by the caller's lock).
std::unique_ptr<KvStore::Conn> KvStore::connect(int timeout_ms) {
  auto c = std::make_unique<Conn>();
  c->c = redisConnectWithTimeout(url_.host.c_str(), url_.port, tv_ms(timeout_ms));
  if (!c->c || c->c->err) return nullptr;
  redisSetTimeout(c->c, tv_ms(timeout_ms));
  redisEnableKeepAlive(c->c);
  auto ok = [&](redisReply* r) {
    const bool good = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return good;
  };
  if (!url_.password.empty()) {
    redisReply* r = url_.user.empty()
                        ? static_cast<redisReply*>(redisCommand(c->c, "AUTH %s", url_.password.c_str()))
                        : static_cast<redisReply*>(redisCommand(c->c, "AUTH %s %s", url_.user.c_str(), url_.password.c_str()));
    if (!ok(r)) return nullptr;
  }
  if (url_.db != 0 && !ok(static_cast<redisReply*>(redisCommand(c->c, "SELECT %d", url_.db)))) return nullptr;
  return c;
}

std::unique_ptr<KvStore::Conn> KvStore::take_read_conn(int64_t deadline_us) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (backing_off()) return nullptr;
    if (!idle_conns_.empty()) {
      auto c = std::move(idle_conns_.back());
      idle_conns_.pop_back();
      return c;
    }
    if (open_conns_ < opt_.read_connections) break;
    const int64_t left = deadline_us - now_us();
    if (left <= 0) return nullptr;
    conn_cv_.wait_for(lk, std::chrono::microseconds(left));
  }
  ++open_conns_;
  lk.unlock();
  const int64_t left_ms = (deadline_us - now_us()) / 1000;
  auto c = left_ms > 0 ? connect(static_cast<int>(std::min<int64_t>(left_ms, opt_.connect_timeout_ms))) : nullptr;
  if (!c) {
    std::lock_guard<std::mutex> g(mu_);
    --open_conns_;
    failed(left_ms > 0 ? "cannot connect (refused, timed out or AUTH failed)" : "lookup deadline passed");
    conn_cv_.notify_one();
  }
  return c;
}

void KvStore::give_read_conn(std::unique_ptr<Conn> c) {
  std::lock_guard<std::mutex> g(mu_);
  if (c) {
    idle_conns_.push_back(std::move(c));
  } else {
    --open_conns_;
  }
  conn_cv_.notify_one();
}

std::vector<std::string> KvStore::get(const std::vector<std::string>& keys) {
  std::vector<std::string> out(keys.size());
  if (keys.empty()) return out;
  const int64_t t0 = now_us(), deadline = t0 + int64_t(opt_.lookup_deadline_ms) * 1000;
  int64_t found = 0, bytes = 0;
  std::string error;
  std::unique_ptr<Conn> c = take_read_conn(deadline);
  if (c) {
    redisSetTimeout(c->c, tv_ms(std::max<int64_t>(1, (deadline - now_us()) / 1000)));
    for (const std::string& k : keys) {
      const char* argv[2] = {"GET", k.data()};
      const size_t len[2] = {3, k.size()};
      redisAppendCommandArgv(c->c, 2, argv, len);
    }
    for (int done = 0; !done;)
      if (redisBufferWrite(c->c, &done) != REDIS_OK) {
        error = c->error();
        break;
      }
    RawReplies replies(c->c->fd, max_value_.load());
    for (size_t i = 0; i < keys.size() && error.empty(); ++i) {
      if (!replies.get(out[i], error)) {
        if (now_us() >= deadline) error = "lookup deadline passed";
        break;
      }
      if (!out[i].empty()) {
        ++found;
        bytes += static_cast<int64_t>(out[i].size());
      } else if (replies.too_big) {
        count_invalid();
      }
      if (now_us() > deadline && i + 1 < keys.size()) {  // the rest is not awaited
        error = "lookup deadline passed";
        break;
      }
    }
    if (!error.empty()) {
      for (size_t i = 0; i < keys.size(); ++i) out[i].clear();  // a partial answer is not used
      found = 0;
      bytes = 0;
      c.reset();  // replies may still be in flight: the connection is not reused
    }
  } else {
    error = "unavailable";
  }
  const double sec = (now_us() - t0) * 1e-6;
  {
    std::lock_guard<std::mutex> g(mu_);
    ++s_.lookups;
    s_.hits += found;
    s_.misses += static_cast<int64_t>(keys.size()) - found;
    s_.blocks_read += found;
    s_.bytes_read += bytes;
    s_.lookup_seconds += sec;
    s_.lookup_seconds_max = std::max(s_.lookup_seconds_max, sec);
    if (!error.empty() && error != "unavailable") failed(error);
    else if (error.empty()) succeeded();
  }
  give_read_conn(std::move(c));
  return out;
}

bool KvStore::has_room(size_t bytes) const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<int>(queue_.size()) < opt_.queue_blocks && queued_bytes_ + bytes <= opt_.queue_bytes;
}

bool KvStore::put(std::string key, std::string value) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (written_.count(key)) {
      ++s_.duplicate_writes;
      return false;
    }
    if (static_cast<int>(queue_.size()) >= opt_.queue_blocks || queued_bytes_ + value.size() > opt_.queue_bytes ||
        stop_) {
      ++s_.dropped_writes;
      return false;
    }
    queued_bytes_ += value.size();
    queue_.push_back({std::move(key), std::move(value)});
  }
  cv_.notify_all();
  return true;
}

void KvStore::count_dropped() {
  std::lock_guard<std::mutex> g(mu_);
  ++s_.dropped_writes;
}

void KvStore::flush(int ms) {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait_for(lk, std::chrono::milliseconds(ms), [&] { return queue_.empty() && !writing_; });
}

void KvStore::writer() {
  std::unique_ptr<Conn> c;
  std::unique_lock<std::mutex> lk(mu_);
  bool probe = true;  // at once: /health knows the state from the start
  for (;;) {
    if (!probe) cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stop_ || !queue_.empty(); });
    probe = false;
    if (stop_) return;
    if (queue_.empty()) {  // idle: a PING a second keeps the state /health reports current (and reconnects)
      if (backing_off()) continue;
      lk.unlock();
      if (!c) c = connect(opt_.connect_timeout_ms);
      bool ok = false;
      if (c) {
        redisSetTimeout(c->c, tv_ms(opt_.connect_timeout_ms));
        auto* r = static_cast<redisReply*>(redisCommand(c->c, "PING"));
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (!ok) c.reset();
      }
      lk.lock();
      if (ok) succeeded();
      else failed("cannot connect (refused, timed out or AUTH failed)");
      continue;
    }
    Item it = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= it.value.size();
    if (written_.count(it.key)) {  // the same block queued twice
      ++s_.duplicate_writes;
      idle_cv_.notify_all();
      continue;
    }
    writing_ = true;
    const bool wait = backing_off();
    const int64_t retry_at = retry_at_us_;
    lk.unlock();
    std::string error;
    if (wait) {  // the store is down: the write is lost (counted), the queue keeps draining
      error = "backoff";
      std::this_thread::sleep_for(std::chrono::microseconds(std::max<int64_t>(0, std::min<int64_t>(retry_at - now_us(), 100000))));
    } else {
      if (!c) c = connect(opt_.connect_timeout_ms);
      if (!c) {
        error = "cannot connect (refused, timed out or AUTH failed)";
      } else {
        redisSetTimeout(c->c, tv_ms(10000));
        const std::string ttl = std::to_string(opt_.ttl_seconds);
        const char* argv[5] = {"SET", it.key.data(), it.value.data(), "EX", ttl.c_str()};
        const size_t len[5] = {3, it.key.size(), it.value.size(), 2, ttl.size()};
        auto* r = static_cast<redisReply*>(redisCommandArgv(c->c, opt_.ttl_seconds > 0 ? 5 : 3, argv, len));
        if (!r) {
          error = c->error();
        } else if (r->type != REDIS_REPLY_STATUS) {
          error = r->type == REDIS_REPLY_ERROR ? "SET: " + std::string(r->str, r->len) : "SET: unexpected reply";
        }
        if (r) freeReplyObject(r);
        if (!error.empty()) c.reset();
      }
    }
    lk.lock();
    writing_ = false;
    if (error.empty()) {
      ++s_.blocks_written;
      s_.bytes_written += static_cast<int64_t>(it.value.size());
      if (written_.size() >= kWrittenKeys) written_.clear();
      written_.insert(std::move(it.key));
      succeeded();
    } else {
      ++s_.dropped_writes;
      if (error != "backoff") failed(error);
    }
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

KvStoreStats KvStore::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  KvStoreStats s = s_;
  s.invalid_values = invalid_.load();
  s.queued = static_cast<int>(queue_.size());
  return s;
}

std::string KvStore::state() const {
  std::lock_guard<std::mutex> g(mu_);
  if (s_.connected) return "connected";
  if (last_error_.empty()) return "connecting";
  return "disconnected: " + last_error_;
}

}  // namespace tkv::kvstore
