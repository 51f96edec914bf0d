#include "server/http_request.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tkv::server {
namespace {

bool ieq(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_token_char(unsigned char c) {
  return c > 32 && c < 127 && !std::strchr("()<>@,;:\\\"/[]?={}", c);
}

// A comma-separated header value contains `word` as one of its items.
bool has_item(std::string_view v, std::string_view word) {
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string_view::npos) comma = v.size();
    if (ieq(trim(v.substr(pos, comma - pos)), word)) return true;
    pos = comma + 1;
  }
  return false;
}

}  // namespace

std::string ParsedRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (ieq(k, name)) return v;
  return "";
}

HttpRequestParser::State HttpRequestParser::fail(int status, std::string msg) {
  state_ = State::kError;
  err_status_ = status;
  err_ = std::move(msg);
  buf_.clear();
  buf_.shrink_to_fit();
  req_.body.clear();
  req_.body.shrink_to_fit();
  return state_;
}

bool HttpRequestParser::line(size_t& pos, std::string_view& out) {
  const size_t nl = buf_.find('\n', pos);
  if (nl == std::string::npos) return false;
  out = std::string_view(buf_).substr(pos, nl - pos);
  if (!out.empty() && out.back() == '\r') out.remove_suffix(1);
  pos = nl + 1;
  return true;
}

HttpRequestParser::State HttpRequestParser::parse_head(size_t end) {
  size_t pos = 0;
  std::string_view l;
  // Blank lines before the request line are ignored (RFC 9112 2.2).
  do {
    if (!line(pos, l) || pos > end) return fail(400, "the request has no request line");
  } while (l.empty());
  const size_t s1 = l.find(' '), s2 = s1 == std::string_view::npos ? s1 : l.find(' ', s1 + 1);
  if (s2 == std::string_view::npos || l.find(' ', s2 + 1) != std::string_view::npos)
    return fail(400, "the request line is not 'METHOD TARGET HTTP/1.x'");
  const std::string_view method = l.substr(0, s1), target = l.substr(s1 + 1, s2 - s1 - 1), version = l.substr(s2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), [](char c) { return is_token_char(c); }))
    return fail(400, "the request method is not a token");
  if (target.empty() || target[0] != '/') return fail(400, "the request target must start with '/'");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 32 || c == 127) return fail(400, "the request target holds a control character");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
  req_.method = std::string(method);
  req_.target = std::string(target);
  req_.version = std::string(version);
  const size_t q = target.find('?');
  req_.path = std::string(target.substr(0, q));
  req_.query = q == std::string_view::npos ? "" : std::string(target.substr(q + 1));
  req_.keep_alive = version == "HTTP/1.1";
  bool chunked = false, has_length = false, has_te = false;
  while (line(pos, l) && pos <= end && !l.empty()) {
    if (l[0] == ' ' || l[0] == '\t') return fail(400, "obsolete header line folding is not accepted");
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return fail(400, "a header line has no 'name:'");
    const std::string_view name = l.substr(0, colon), value = trim(l.substr(colon + 1));
    if (!std::all_of(name.begin(), name.end(), [](char c) { return is_token_char(c); }))
      return fail(400, "a header name is not a token");
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 32 && c != '\t') || c == 127)
        return fail(400, "header '" + std::string(name) + "' holds a control character");
    if (ieq(name, "Content-Length")) {
      if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return fail(400, "'Content-Length' must be one decimal number");
      const uint64_t n = std::stoull(std::string(value));
      if (has_length && n != content_length_) return fail(400, "two different 'Content-Length' headers");
      has_length = true;
      content_length_ = n;
    } else if (ieq(name, "Transfer-Encoding")) {
      has_te = true;
      if (!ieq(value, "chunked")) return fail(501, "'Transfer-Encoding' other than 'chunked' is not supported");
      chunked = true;
    } else if (ieq(name, "Connection")) {
      if (has_item(value, "close")) req_.keep_alive = false;
      else if (has_item(value, "keep-alive")) req_.keep_alive = true;
    } else if (ieq(name, "Expect")) {
      if (!ieq(value, "100-continue")) return fail(417, "only 'Expect: 100-continue' is supported");
      req_.expect_continue = true;
    }
    req_.headers.emplace_back(std::string(name), std::string(value));
  }
  if (has_te && has_length) return fail(400, "a request may not have both 'Content-Length' and 'Transfer-Encoding'");
  buf_.erase(0, end);
  if (chunked) {
    if (req_.version == "HTTP/1.0") return fail(400, "chunked bodies need HTTP/1.1");
    state_ = State::kChunkSize;
    return state_;
  }
  if (content_length_ > lim_.max_body)
    return fail(413, "the request body of " + std::to_string(content_length_) + " bytes is over the limit of " +
                         std::to_string(lim_.max_body) + " bytes");
  if (content_length_ == 0) {
    state_ = State::kDone;
    return state_;
  }
  req_.body.reserve(static_cast<size_t>(content_length_));
  state_ = State::kBody;
  return state_;
}

HttpRequestParser::State HttpRequestParser::feed(const char* data, size_t n) {
  if (state_ == State::kError) return state_;
  // The body of a Content-Length request goes straight to the body.
  if (state_ == State::kBody && buf_.empty()) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, content_length_ - req_.body.size()));
    req_.body.append(data, take);
    buf_.append(data + take, n - take);  // pipelined
    if (req_.body.size() == content_length_) state_ = State::kDone;
    return state_;
  }
  buf_.append(data, n);
  for (;;) {
    switch (state_) {
      case State::kHead: {
        // Finds the blank line that ends the head, counting lines as it goes.
        size_t end = std::string::npos;
        for (size_t i = scanned_; i < buf_.size(); ++i) {
          if (buf_[i] != '\n') continue;
          ++trailer_lines_;  // head lines so far (reused: trailers come later)
          const bool blank = (i >= 1 && buf_[i - 1] == '\n') || (i >= 2 && buf_[i - 1] == '\r' && buf_[i - 2] == '\n');
          // A blank line before the request line is not the end of the head.
          const bool only_blank = buf_.find_first_not_of("\r\n") > i;
          if (blank && !only_blank) {
            end = i + 1;
            break;
          }
          if (trailer_lines_ > lim_.max_headers + 1 + 4)
            return fail(431, "the request has more than " + std::to_string(lim_.max_headers) + " header lines");
        }
        scanned_ = end == std::string::npos ? buf_.size() : end;
        if (end == std::string::npos) {
          if (buf_.size() > lim_.max_head_bytes)
            return fail(431, "the request head is over the limit of " + std::to_string(lim_.max_head_bytes) + " bytes");
          return state_;
        }
        if (end > lim_.max_head_bytes)
          return fail(431, "the request head is over the limit of " + std::to_string(lim_.max_head_bytes) + " bytes");
        trailer_lines_ = 0;
        if (parse_head(end) == State::kError) return state_;
        if (req_.headers.size() > lim_.max_headers)
          return fail(431, "the request has more than " + std::to_string(lim_.max_headers) + " header lines");
        break;
      }
      case State::kBody: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(buf_.size(), content_length_ - req_.body.size()));
        req_.body.append(buf_, 0, take);
        buf_.erase(0, take);
        if (req_.body.size() == content_length_) state_ = State::kDone;
        return state_;
      }
      case State::kChunkSize: {
        size_t pos = 0;
        std::string_view l;
        if (!line(pos, l)) {
          if (buf_.size() > 1024) return fail(400, "a chunk-size line is longer than 1024 bytes");
          return state_;
        }
        const size_t semi = l.find(';');  // chunk extensions are ignored
        const std::string_view hex = trim(l.substr(0, semi));
        if (hex.empty() || hex.size() > 15) return fail(400, "a chunk size is not a hexadecimal number of at most 15 digits");
        uint64_t size = 0;
        for (char c : hex) {
          const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
          if (d < 0) return fail(400, "a chunk size is not a hexadecimal number of at most 15 digits");
          size = size * 16 + uint64_t(d);
        }
        buf_.erase(0, pos);
        if (size == 0) {
          state_ = State::kTrailers;
          break;
        }
        if (size > lim_.max_body || req_.body.size() + size > lim_.max_body)
          return fail(413, "the chunked request body is over the limit of " + std::to_string(lim_.max_body) + " bytes");
        chunk_left_ = size;
        state_ = State::kChunkData;
        break;
      }
      case State::kChunkData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(buf_.size(), chunk_left_));
        req_.body.append(buf_, 0, take);
        buf_.erase(0, take);
        chunk_left_ -= take;
        if (chunk_left_ > 0) return state_;
        state_ = State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        size_t pos = 0;
        std::string_view l;
        if (!line(pos, l)) {
          if (buf_.size() > 2) return fail(400, "a chunk's data does not end with CRLF");
          return state_;
        }
        if (!l.empty()) return fail(400, "a chunk's data does not end with CRLF");
        buf_.erase(0, pos);
        state_ = State::kChunkSize;
        break;
      }
      case State::kTrailers: {
        size_t pos = 0;
        std::string_view l;
        if (!line(pos, l)) {
          if (trailer_bytes_ + buf_.size() > lim_.max_head_bytes)
            return fail(431, "the chunked trailers are over the limit of " + std::to_string(lim_.max_head_bytes) + " bytes");
          return state_;
        }
        trailer_bytes_ += pos;
        buf_.erase(0, pos);
        if (l.empty()) {
          state_ = State::kDone;
          return state_;
        }
        if (++trailer_lines_ > lim_.max_headers || trailer_bytes_ > lim_.max_head_bytes)
          return fail(431, "the chunked trailers are over the limit of " + std::to_string(lim_.max_headers) + " lines or " +
                               std::to_string(lim_.max_head_bytes) + " bytes");
        break;  // trailer fields are read and dropped
      }
      case State::kDone:
      case State::kError: return state_;
    }
  }
}

std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') out += ' ';
    else if (s[i] == '%' && i + 2 < s.size() + 0 && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_query(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos < q.size() && out.size() < 100) {
    size_t amp = q.find('&', pos);
    if (amp == std::string_view::npos) amp = q.size();
    const std::string_view kv = q.substr(pos, amp - pos);
    if (!kv.empty()) {
      const size_t eq = kv.find('=');
      out.emplace_back(url_decode(kv.substr(0, eq)), eq == std::string_view::npos ? "" : url_decode(kv.substr(eq + 1)));
    }
    pos = amp + 1;
  }
  return out;
}

}  // namespace tkv::server
