// Chat templates for `turbokv serve`: turn a list of chat messages into the
// prompt text a model family was fine-tuned on. We do not run the GGUF's Jinja
// (that would need a template engine); instead the family is recognised from
// the template's distinctive markers and rendered by hand, matching what the
// family's published template produces for system/user/assistant messages.
#pragma once
#include <string>
#include <vector>

#include "util/status.h"

namespace tkv::server {

struct ChatMessage {
  std::string role, content;  // role: "system", "user" or "assistant"
};

enum class ChatFormat { kChatML, kLlama3, kLlama2, kMistral, kGemma, kPhi3, kZephyr };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatML;
  std::string name;       // "chatml", "llama3", "llama2", "mistral", "gemma", "phi3", "zephyr"
  bool fallback = false;  // true when detection failed and ChatML was chosen
  std::string note;       // why fallback is set (for a log line), else empty
};

// For --chat-template; an unknown name gives an error listing the known ones.
Expected<ChatTemplate> chat_template_named(const std::string& name);

// The known names, in ChatFormat order.
const std::vector<std::string>& chat_template_names();

// Recognises the family from a GGUF's `tokenizer.chat_template` text. Empty or
// unrecognised text gives ChatML with fallback = true and a note.
ChatTemplate detect_chat_template(const std::string& jinja);

// Checks roles (system/user/assistant only) and that there is a message;
// the error names the message index, e.g. "'messages[2].role' ...".
Status validate_chat(const std::vector<ChatMessage>& msgs);

// The prompt text for msgs. The text is tokenized with special-token parsing
// and no automatic BOS, so bos_text is written where the family's template
// writes bos_token (Llama 2/3, Mistral, Gemma) and nowhere else. Roles are
// assumed valid (see validate_chat); unknown roles are skipped. Where a family
// has no system role the system text joins the next user turn: Llama 2 in a
// <<SYS>> block, Mistral (Mistral AI's "v1" template) and Gemma as a prefix
// followed by "\n\n". Llama 2/3 and Gemma trim message content, as theirs do.
// add_generation_prompt has no effect for Llama 2 and Mistral: their prompt
// already ends in [/INST].
std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, const std::string& bos_text,
                        const std::string& eos_text, bool add_generation_prompt = true);

// Whether render_chat writes bos_text for this family. When it does not, the
// server may still want the vocabulary's automatic BOS (Phi-3 and Zephyr's
// tokenizers add one; ChatML/Qwen ones do not).
bool template_writes_bos(const ChatTemplate& t);

// The special-token texts that end an assistant turn in this family. The
// server should also stop on the vocabulary's EOS token.
std::vector<std::string> end_of_turn_texts(const ChatTemplate& t);

}  // namespace tkv::server
