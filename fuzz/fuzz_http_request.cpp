// libFuzzer harness for the server's request parsing: the HTTP framing
// (server/http_request.h: request line, headers, Content-Length and chunked
// bodies, under small limits, fed in pieces whose sizes come from the input)
// and the JSON bodies of /v1/completions, /v1/chat/completions, /tokenize
// and /detokenize (server/openai_api.h), then what a parsed request turns
// into (sampler settings, the chat prompt). Byte 0 picks the case (0-3: the
// endpoint, the rest is the body; 4: framing, byte 1 the split), the rest is
// the input. Seeds in fuzz/corpus/http_request/.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "server/http_request.h"
#include "server/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace s = tkv::server;
  if (data[0] % 8 == 4) {
    // Framing: fed in pieces of 1..16 bytes (byte 1 seeds the sizes); the
    // budget must hold whatever the split, and a split must not change the result.
    if (size < 2) return 0;
    s::HttpLimits lim;
    lim.max_head_bytes = 512;
    lim.max_headers = 8;
    lim.max_body = 1024;
    const std::string_view in = body.substr(1);
    s::HttpRequestParser whole(lim), split(lim);
    whole.feed(in.data(), in.size());
    uint32_t r = data[1] | 1u;
    for (size_t off = 0; off < in.size() && !split.done() && !split.failed();) {
      r = r * 1103515245u + 12345u;
      const size_t n = std::min<size_t>(in.size() - off, 1 + (r >> 16) % 16);
      split.feed(in.data() + off, n);
      off += n;
      if (split.held_bytes() > lim.max_head_bytes + lim.max_body + 16 + 1024) __builtin_trap();
    }
    if (whole.done() != split.done() || whole.failed() != split.failed()) __builtin_trap();
    if (whole.done()) {
      if (whole.request().body != split.request().body) __builtin_trap();
      if (whole.request().body.size() > lim.max_body) __builtin_trap();
      if (whole.request().headers.size() > lim.max_headers) __builtin_trap();
      (void)s::parse_query(whole.request().query);
    }
    if (whole.failed() && (whole.error_status() < 400 || whole.error().empty())) __builtin_trap();
    return 0;
  }
  switch (data[0] % 4) {
    case 0:
    case 1: {
      s::CompletionRequest r;
      const bool chat = data[0] % 4 == 1;
      if (auto e = s::parse_completion_request(body, chat, r)) {
        (void)s::error_json(*e);
        return 0;
      }
      (void)s::sampler_options(r.sampling, 42);
      if (chat && s::validate_chat(r.messages).ok()) {
        const auto t = s::chat_template_named("chatml");
        if (t) (void)s::render_chat(*t, r.messages, "", "", true);
      }
      break;
    }
    case 2: {
      s::TokenizeRequest r;
      if (auto e = s::parse_tokenize_request(body, r)) (void)s::error_json(*e);
      break;
    }
    case 3: {
      std::vector<int32_t> ids;
      if (auto e = s::parse_detokenize_request(body, ids, 32000)) (void)s::error_json(*e);
      else
        for (int32_t id : ids)
          if (id < 0 || id >= 32000) __builtin_trap();
      break;
    }
  }
  return 0;
}
