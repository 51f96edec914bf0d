// Chat templates for `turbokv serve`: turn a list of chat messages into the
// prompt text a model family was fine-tuned on. We do not run the GGUF's Jinja
// (that would need a template engine); instead the family is recognised from
// the template's distinctive markers and rendered by hand, matching what the
// family's published template produces for system/user/assistant messages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace tkv::server {

struct ChatMessage {
  std::string role, content;  // role: "system", "user" or "assistant"
};

enum class ChatFormat { kChatML, kLlama3, kLlama2, kMistral, kGemma, kPhi3, kZephyr, kHarmony };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kChatML;
  std::string name;       // "chatml", "llama3", "llama2", "mistral", "gemma", "phi3", "zephyr", "harmony"
  bool fallback = false;  // true when detection failed and ChatML was chosen
  std::string note;       // why fallback is set (for a log line), else empty
  // harmony: the "Current date:" of its system message (YYYY-MM-DD); empty:
  // today's, as gpt-oss's template writes strftime_now("%Y-%m-%d").
  std::string date;
};

// For --chat-template; an unknown name gives an error listing the known ones.
Expected<ChatTemplate> chat_template_named(const std::string& name);

// The known names, in ChatFormat order.
const std::vector<std::string>& chat_template_names();

// Recognises the family from a GGUF's `tokenizer.chat_template` text. Empty or
// unrecognised text gives ChatML with fallback = true and a note, except for
// architecture "gpt-oss", whose files without a template get harmony (the
// only format gpt-oss was trained on).
ChatTemplate detect_chat_template(const std::string& jinja, const std::string& architecture = "");

// Checks roles (system/user/assistant only; harmony also takes "developer"
// as the first message) and that there is a message; the error names the
// message index, e.g. "'messages[2].role' ...".
Status validate_chat(const std::vector<ChatMessage>& msgs);
Status validate_chat(const ChatTemplate& t, const std::vector<ChatMessage>& msgs);

// The prompt text for msgs. The text is tokenized with special-token parsing
// and no automatic BOS, so bos_text is written where the family's template
// writes bos_token (Llama 2/3, Mistral, Gemma) and nowhere else. Roles are
// assumed valid (see validate_chat); unknown roles are skipped. Where a family
// has no system role the system text joins the next user turn: Llama 2 in a
// <<SYS>> block, Mistral (Mistral AI's "v1" template) and Gemma as a prefix
// followed by "\n\n". Llama 2/3 and Gemma trim message content, as theirs do.
// add_generation_prompt has no effect for Llama 2 and Mistral: their prompt
// already ends in [/INST].
// Harmony (gpt-oss) follows OpenAI's gpt-oss template without tools: a
// system message "<|start|>system<|message|>" (identity, knowledge cutoff,
// t.date, "Reasoning: medium", the valid channels) "<|end|>"; a first system
// or developer message becomes "<|start|>developer<|message|># Instructions
// \n\n" TEXT "\n\n<|end|>" (later ones are dropped, as there); user turns
// "<|start|>user<|message|>" TEXT "<|end|>"; earlier assistant turns their
// final channel "<|start|>assistant<|channel|>final<|message|>" TEXT "<|end|>"
// (<|return|> instead for a last one without a generation prompt); the
// generation prompt is "<|start|>assistant".
std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, const std::string& bos_text,
                        const std::string& eos_text, bool add_generation_prompt = true);

// Whether render_chat writes bos_text for this family. When it does not, the
// server may still want the vocabulary's automatic BOS (Phi-3 and Zephyr's
// tokenizers add one; ChatML/Qwen ones do not).
bool template_writes_bos(const ChatTemplate& t);

// The special-token texts that end an assistant turn in this family. The
// server should also stop on the vocabulary's EOS token. Harmony's are
// <|return|> and <|call|>: its <|end|> ends one message (the analysis) and
// generation goes on, as llama.cpp takes <|end|> off the end-of-generation
// tokens when a vocabulary has <|return|> and <|call|>.
std::vector<std::string> end_of_turn_texts(const ChatTemplate& t);

// What a harmony reply shows its client: the text of its final-channel
// messages only. Fed the generated tokens one at a time; push returns the
// part of the token's text to send (empty for headers, the analysis and
// commentary channels and the special tokens). A reply that writes text
// before any header (not harmony at all) has that text shown, as a model
// that ignores the format would otherwise answer nothing.
class HarmonyFilter {
 public:
  struct Ids {
    int32_t start = -1, end = -1, message = -1, channel = -1, ret = -1, call = -1, constrain = -1;
  };
  explicit HarmonyFilter(Ids ids) : ids_(ids) {}
  // token: its id; text: its bytes (a special token's own text is ignored).
  std::string push(int32_t token, const std::string& text);

 private:
  enum class State { kFirst, kHeader, kContent, kBetween };
  Ids ids_;
  State state_ = State::kFirst;  // the prompt ended "<|start|>assistant": a header comes first
  std::string header_;           // the current header's text after <|channel|>
  bool have_channel_ = false;    // the current header named a channel
  bool final_ = false;           // the current message is on the final channel
};

// The channel a harmony header names ("analysis" from
// "<|channel|>analysis", "final" from " to=x<|channel|>final <|constrain|>json"),
// given the header's text after <|channel|>; empty when it names none.
std::string harmony_channel(const std::string& after_channel);

}  // namespace tkv::server
