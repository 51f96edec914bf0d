// libFuzzer harness for the chat-template recogniser and renderer
// (text/chat_template.h): the input up to the first NUL is a GGUF's
// tokenizer.chat_template text, the rest NUL-separated role/content pairs;
// the family is recognised, the messages validated and rendered with and
// without the generation prompt. Seeds in fuzz/corpus/chat_template/: the
// published templates' distinctive parts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= in.size()) {
    const size_t nul = in.find('\0', at);
    const size_t end = nul == std::string::npos ? in.size() : nul;
    parts.push_back(in.substr(at, end - at));
    at = end + 1;
  }
  const auto t = tkv::server::detect_chat_template(parts[0]);
  std::vector<tkv::server::ChatMessage> msgs;
  for (size_t i = 1; i + 1 < parts.size(); i += 2) msgs.push_back({parts[i], parts[i + 1]});
  (void)tkv::server::template_writes_bos(t);
  (void)tkv::server::end_of_turn_texts(t);
  if (!tkv::server::validate_chat(msgs).ok()) return 0;
  (void)tkv::server::render_chat(t, msgs, "<s>", "</s>", true);
  (void)tkv::server::render_chat(t, msgs, "", "", false);
  return 0;
}
