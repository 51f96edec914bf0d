// turbokv's own HTTP/1.1 request reader for `turbokv serve`: an incremental
// parser fed whatever bytes a socket gave, which enforces one request budget
// while it reads, whatever the framing (Content-Length or chunked): the
// request head's bytes and header count, the body's bytes, and no smuggling
// (both Content-Length and Transfer-Encoding, a Content-Length that is not
// one decimal number, a transfer coding other than chunked). It never holds
// more than the head limit plus the body limit (plus one read), and reports
// an over-limit request as soon as the limit is passed, before the rest has
// arrived. Pure code (no sockets, no threads): fuzz/fuzz_http_request.cpp
// feeds it directly.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tkv::server {

struct HttpLimits {
  size_t max_head_bytes = 32u << 10;  // request line + headers (and chunked trailers)
  size_t max_headers = 100;           // header lines (and trailer lines)
  size_t max_body = 16u << 20;        // body bytes after de-chunking
};

struct ParsedRequest {
  std::string method, target, path, query, version;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  std::string body;
  bool keep_alive = true;        // HTTP/1.1 without "Connection: close", or 1.0 with keep-alive
  bool expect_continue = false;  // "Expect: 100-continue"
  // The value of the first header of this name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

class HttpRequestParser {
 public:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone, kError };
  explicit HttpRequestParser(HttpLimits limits = {}) : lim_(limits) {}
  // Consumes bytes; returns the state after them. Bytes past the end of a
  // complete request are kept (leftover(): a pipelined next request).
  State feed(const char* data, size_t n);
  State state() const { return state_; }
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kError; }
  // Once the head is read: body bytes still expected (Content-Length), or 0.
  bool head_complete() const { return state_ != State::kHead && state_ != State::kError; }
  // The error: an HTTP status (400, 413, 431, 501, 505) and a message naming the limit or field.
  int error_status() const { return err_status_; }
  const std::string& error() const { return err_; }
  ParsedRequest& request() { return req_; }
  const ParsedRequest& request() const { return req_; }
  std::string take_leftover() { return std::move(buf_); }
  // Bytes held now (buffer + body): what this request costs in memory.
  size_t held_bytes() const { return buf_.size() + req_.body.size(); }
  // The body length a Content-Length announced (0 when chunked or none).
  uint64_t announced_length() const { return content_length_; }

 private:
  State fail(int status, std::string msg);
  State parse_head(size_t end);
  bool line(size_t& pos, std::string_view& out);  // the next CRLF/LF line of buf_ from pos
  HttpLimits lim_;
  State state_ = State::kHead;
  std::string buf_;  // unconsumed bytes
  size_t scanned_ = 0;  // head: bytes of buf_ already searched for the blank line
  ParsedRequest req_;
  uint64_t content_length_ = 0, chunk_left_ = 0;
  size_t trailer_bytes_ = 0, trailer_lines_ = 0;
  int err_status_ = 0;
  std::string err_;
};

// Percent-decodes a query component ('+' is a space); invalid escapes stay as sent.
std::string url_decode(std::string_view s);
// The key=value pairs of a query string, decoded.
std::vector<std::pair<std::string, std::string>> parse_query(std::string_view q);

}  // namespace tkv::server
