#include "text/chat_template.h"

#include <ctime>
#include <string_view>

namespace tkv::server {
namespace {

struct Family {
  ChatFormat format;
  const char* name;
};
constexpr Family kFamilies[] = {
    {ChatFormat::kChatML, "chatml"}, {ChatFormat::kLlama3, "llama3"}, {ChatFormat::kLlama2, "llama2"},
    {ChatFormat::kMistral, "mistral"}, {ChatFormat::kGemma, "gemma"}, {ChatFormat::kPhi3, "phi3"},
    {ChatFormat::kZephyr, "zephyr"}, {ChatFormat::kHarmony, "harmony"},
};

ChatTemplate make(ChatFormat f) {
  for (const auto& fam : kFamilies)
    if (fam.format == f) return ChatTemplate{f, fam.name, false, "", ""};
  return ChatTemplate{ChatFormat::kChatML, "chatml", false, "", ""};
}

bool has(const std::string& s, std::string_view needle) { return s.find(needle) != std::string::npos; }

// Jinja's `trim` and Python's str.strip() (Llama 2/3, Gemma templates strip the
// content); ASCII whitespace covers what chat clients actually send.
std::string trim(const std::string& s) {
  constexpr const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Families with a role per turn and no special system handling.
std::string render_tagged(const std::vector<ChatMessage>& msgs, std::string_view open, std::string_view mid,
                          std::string_view close, bool trim_content, std::string_view gen, bool add_gen) {
  std::string out;
  for (const auto& m : msgs) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") continue;
    out.append(open).append(m.role).append(mid);
    out += trim_content ? trim(m.content) : m.content;
    out.append(close);
  }
  if (add_gen) out.append(gen);
  return out;
}

// Llama 2 and Mistral: [INST] blocks for user turns, assistant text then EOS.
// These templates have no system turn: a system message is carried into the
// next user turn (Llama 2 inside <<SYS>>, Mistral as a "\n\n"-separated prefix).
// Mistral follows Mistral AI's published "v1" template (Mistral 7B Instruct
// v0.1/v0.2): " [INST] " and " " before the assistant text, the spaces that
// its tokenizer writes as the "▁" of "▁[INST]" and of the reply's first piece.
std::string render_inst(bool llama2, const std::vector<ChatMessage>& msgs, const std::string& bos,
                        const std::string& eos) {
  std::string out = llama2 ? "" : bos;  // Mistral writes BOS once; Llama 2 before every [INST]
  std::string pending_system;
  bool have_system = false;
  auto user_turn = [&](const std::string& content) {
    std::string body = content;
    if (have_system) {
      body = llama2 ? "<<SYS>>\n" + pending_system + "\n<</SYS>>\n\n" + content : pending_system + "\n\n" + content;
      have_system = false;
      pending_system.clear();
    }
    if (llama2) out.append(bos).append("[INST] ").append(trim(body)).append(" [/INST]");
    else out.append(" [INST] ").append(body).append(" [/INST]");
  };
  for (const auto& m : msgs) {
    if (m.role == "system") {
      pending_system += have_system ? "\n\n" + m.content : m.content;
      have_system = true;
    } else if (m.role == "user") {
      user_turn(m.content);
    } else if (m.role == "assistant") {
      out.append(" ").append(llama2 ? trim(m.content) : m.content);
      if (llama2) out.append(" ");
      out += eos;
    }
  }
  if (have_system) user_turn("");  // a system message with no user turn after it still reaches the model
  return out;
}

// Gemma has no system role: it is prepended to the next user turn (Gemma 3's
// template does this; Gemma 1/2's reject system messages outright).
std::string render_gemma(const std::vector<ChatMessage>& msgs, const std::string& bos, bool add_gen) {
  std::string out = bos, pending_system;
  bool have_system = false;
  auto turn = [&](const char* role, const std::string& prefix, const std::string& content) {
    out += std::string("<start_of_turn>") + role + "\n" + prefix + trim(content) + "<end_of_turn>\n";
  };
  for (const auto& m : msgs) {
    if (m.role == "system") {
      pending_system += have_system ? "\n\n" + m.content : m.content;
      have_system = true;
    } else if (m.role == "user") {
      turn("user", have_system ? pending_system + "\n\n" : "", m.content);
      have_system = false;
      pending_system.clear();
    } else if (m.role == "assistant") {
      turn("model", "", m.content);
    }
  }
  if (have_system) turn("user", pending_system + "\n\n", "");
  if (add_gen) out += "<start_of_turn>model\n";
  return out;
}

// gpt-oss's harmony format, as OpenAI's gpt-oss chat template renders a
// conversation without tools (see render_chat in the header).
std::string render_harmony(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, bool add_gen) {
  std::string date = t.date;
  if (date.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[16];
    std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
    date = buf;
  }
  std::string out =
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: " + date +
      "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>";
  size_t first = 0;
  if (!msgs.empty() && (msgs[0].role == "system" || msgs[0].role == "developer")) {
    if (!msgs[0].content.empty())
      out += "<|start|>developer<|message|># Instructions\n\n" + msgs[0].content + "\n\n<|end|>";
    first = 1;
  }
  for (size_t i = first; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user") {
      out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "assistant") {
      const bool last = i + 1 == msgs.size() && !add_gen;
      out += "<|start|>assistant<|channel|>final<|message|>" + m.content + (last ? "<|return|>" : "<|end|>");
    }
  }
  if (add_gen) out += "<|start|>assistant";
  return out;
}

}  // namespace

std::string harmony_channel(const std::string& after_channel) {
  const size_t b = after_channel.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  const size_t e = after_channel.find_first_of(" \t\n<", b);
  return after_channel.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string HarmonyFilter::push(int32_t token, const std::string& text) {
  if (token == ids_.channel) {  // a header names its channel next (also one that skipped <|end|>)
    state_ = State::kHeader;
    header_.clear();
    have_channel_ = true;
    final_ = false;
    return "";
  }
  if (token == ids_.message) {
    if (state_ == State::kHeader || state_ == State::kFirst) {
      // No channel named: the message is shown (a model that drops the
      // channel still answers).
      final_ = !have_channel_ || harmony_channel(header_) == "final";
      state_ = State::kContent;
    }
    return "";
  }
  if (token == ids_.end) {
    state_ = State::kBetween;
    final_ = false;
    return "";
  }
  if (token == ids_.start) {  // the role ("assistant") and a header follow
    state_ = State::kHeader;
    header_.clear();
    have_channel_ = false;
    final_ = false;
    return "";
  }
  if (token == ids_.constrain || token == ids_.ret || token == ids_.call) return "";
  switch (state_) {
    case State::kFirst:  // text where a header belongs: not harmony; shown
      state_ = State::kContent;
      final_ = true;
      return text;
    case State::kHeader: header_ += text; return "";
    case State::kContent: return final_ ? text : "";
    case State::kBetween: return "";
  }
  return "";
}

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : kFamilies) v.emplace_back(f.name);
    return v;
  }();
  return names;
}

Expected<ChatTemplate> chat_template_named(const std::string& name) {
  for (const auto& f : kFamilies)
    if (name == f.name) return make(f.format);
  std::string known;
  for (const auto& n : chat_template_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::Error("unknown chat template '" + name + "' (known: " + known + ")");
}

ChatTemplate detect_chat_template(const std::string& jinja, const std::string& architecture) {
  // Order matters: Phi-3's template also mentions eos_token, so <|end|> is
  // checked before Zephyr's </s>/eos_token; [INST] splits on <<SYS>>;
  // harmony's <|start|> and <|channel|> (llama.cpp's test) before Phi-3's <|end|>.
  if (has(jinja, "<|start|>") && has(jinja, "<|channel|>")) return make(ChatFormat::kHarmony);
  if (jinja.empty() && architecture == "gpt-oss") return make(ChatFormat::kHarmony);
  if (has(jinja, "<|im_start|>")) return make(ChatFormat::kChatML);
  if (has(jinja, "<|start_header_id|>")) return make(ChatFormat::kLlama3);
  if (has(jinja, "[INST]")) return make(has(jinja, "<<SYS>>") ? ChatFormat::kLlama2 : ChatFormat::kMistral);
  if (has(jinja, "<start_of_turn>")) return make(ChatFormat::kGemma);
  if (has(jinja, "<|user|>")) {
    if (has(jinja, "<|end|>")) return make(ChatFormat::kPhi3);
    if (has(jinja, "</s>") || has(jinja, "eos_token")) return make(ChatFormat::kZephyr);
  }
  ChatTemplate t = make(ChatFormat::kChatML);
  t.fallback = true;
  t.note = jinja.empty() ? "the model has no chat template; using ChatML"
                         : "the model's chat template was not recognised; using ChatML";
  return t;
}

Status validate_chat(const std::vector<ChatMessage>& msgs) { return validate_chat(ChatTemplate{}, msgs); }

Status validate_chat(const ChatTemplate& t, const std::vector<ChatMessage>& msgs) {
  if (msgs.empty()) return Status::Error("'messages' must be a non-empty array");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string& r = msgs[i].role;
    if (r == "system" || r == "user" || r == "assistant") continue;
    if (r == "developer" && i == 0 && t.format == ChatFormat::kHarmony) continue;
    const std::string field = "'messages[" + std::to_string(i) + "].role'";
    if (r == "tool" || r == "function" || r == "developer")
      return Status::Error(field + " '" + r + "' is not supported (use system, user or assistant)");
    return Status::Error(field + " must be one of system, user, assistant");
  }
  return Status::Ok();
}

std::string render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& msgs, const std::string& bos_text,
                        const std::string& eos_text, bool add_generation_prompt) {
  switch (t.format) {
    case ChatFormat::kChatML:
      return render_tagged(msgs, "<|im_start|>", "\n", "<|im_end|>\n", false, "<|im_start|>assistant\n",
                           add_generation_prompt);
    case ChatFormat::kLlama3:
      return bos_text + render_tagged(msgs, "<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", true,
                                      "<|start_header_id|>assistant<|end_header_id|>\n\n", add_generation_prompt);
    case ChatFormat::kLlama2: return render_inst(true, msgs, bos_text, eos_text);
    case ChatFormat::kMistral: return render_inst(false, msgs, bos_text, eos_text);
    case ChatFormat::kGemma: return render_gemma(msgs, bos_text, add_generation_prompt);
    case ChatFormat::kPhi3: {
      // Phi-3 ends a conversation without a generation prompt with EOS.
      std::string s = render_tagged(msgs, "<|", "|>\n", "<|end|>\n", false, "<|assistant|>\n", add_generation_prompt);
      return add_generation_prompt ? s : s + eos_text;
    }
    case ChatFormat::kZephyr:
      return render_tagged(msgs, "<|", "|>\n", eos_text + "\n", false, "<|assistant|>\n", add_generation_prompt);
    case ChatFormat::kHarmony: return render_harmony(t, msgs, add_generation_prompt);
  }
  return {};
}

bool template_writes_bos(const ChatTemplate& t) {
  return t.format == ChatFormat::kLlama3 || t.format == ChatFormat::kLlama2 || t.format == ChatFormat::kMistral ||
         t.format == ChatFormat::kGemma;
}

std::vector<std::string> end_of_turn_texts(const ChatTemplate& t) {
  switch (t.format) {
    case ChatFormat::kChatML: return {"<|im_end|>"};
    case ChatFormat::kLlama3: return {"<|eot_id|>"};
    case ChatFormat::kGemma: return {"<end_of_turn>"};
    case ChatFormat::kPhi3: return {"<|end|>"};
    case ChatFormat::kHarmony: return {"<|return|>", "<|call|>"};
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
    case ChatFormat::kZephyr: return {"</s>"};
  }
  return {};
}

}  // namespace tkv::server
