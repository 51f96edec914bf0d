// libFuzzer harness for the server's request parsing (server/openai_api.h):
// the JSON bodies of /v1/completions, /v1/chat/completions, /tokenize and
// /detokenize (byte 0 picks the endpoint, the rest is the body), then what a
// parsed request turns into (sampler settings, the chat prompt). HTTP framing
// itself is cpp-httplib's. Seeds in fuzz/corpus/http_request/.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "text/chat_template.h"
#include "server/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace s = tkv::server;
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
