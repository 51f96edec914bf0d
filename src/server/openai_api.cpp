#include "server/openai_api.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "text/text_stream.h"

namespace tkv::server {
namespace {

using json = nlohmann::json;

ApiError bad(std::string param, std::string message) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// Where parsing body stops, as a field path ("messages[1].content"): the
// body is parsed again with a callback that tracks the current key and array
// index, and the path at the moment of failure is returned ("" at top level).
std::string failing_field(std::string_view body) {
  struct Frame {
    bool array;
    size_t index;
    std::string key;
  };
  std::vector<Frame> stack;
  auto step = [&] {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
  };
  json::parser_callback_t cb = [&](int, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: stack.push_back({false, 0, ""}); break;
      case json::parse_event_t::array_start: stack.push_back({true, 0, ""}); break;
      case json::parse_event_t::key:
        if (!stack.empty()) stack.back().key = parsed.is_string() ? parsed.get<std::string>() : "";
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        step();
        break;
      case json::parse_event_t::value: step(); break;
    }
    // Discarding a container would skip the callbacks inside it, so only
    // scalar values are dropped (the path is all we need).
    return ev != json::parse_event_t::value;
  };
  try {
    json ignored = json::parse(body, cb);
  } catch (const json::exception&) {
  }
  std::string path;
  for (const Frame& f : stack) {
    if (f.array) path += "[" + std::to_string(f.index) + "]";
    else if (!f.key.empty()) path += (path.empty() ? "" : ".") + f.key;
  }
  return path;
}

// Parses the body as a JSON object. nlohmann's parser rejects ill-formed
// UTF-8 inside strings (dumping it later would throw); the error then names
// the field, found by failing_field.
std::optional<ApiError> parse_object(std::string_view body, json& j, int max_depth) {
  if (auto e = check_json_depth(body, max_depth)) return e;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    const std::string what = e.what();
    if (what.find("UTF-8") != std::string::npos) {
      const std::string f = failing_field(body);
      if (!f.empty()) return bad(f, "'" + f + "' must be valid UTF-8");
    }
    // The message quotes the offending bytes, which may be the bad UTF-8 itself.
    return bad("", utf8_sanitize("request body is not valid JSON: " + what));
  }
  if (!j.is_object()) return bad("", "request body must be a JSON object");
  return std::nullopt;
}

// The field, or nullptr when it is absent or null (clients send null for
// "not set", e.g. "stop": null).
const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// A string field, checked to be UTF-8 (defensive: a body built in-process
// skips the parser's check, and dumping invalid UTF-8 throws later).
std::optional<ApiError> get_string(const json& v, const std::string& param, std::string& out) {
  if (!v.is_string()) return bad(param, "'" + param + "' must be a string");
  const auto& s = v.get_ref<const std::string&>();
  if (!utf8_valid(s)) return bad(param, "'" + param + "' must be valid UTF-8");
  out = s;
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& obj, const char* name, bool& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return bad(name, std::string("'") + name + "' must be a boolean");
  out = v->get<bool>();
  return std::nullopt;
}

// A finite number in [lo, hi] (lo_open: (lo, hi]); `range` is how the message states it.
std::optional<ApiError> get_number(const json& obj, const char* name, double lo, double hi, bool lo_open,
                                   const char* range, float& out) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  const std::string msg = std::string("'") + name + "' must be a number " + range;
  if (!v->is_number()) return bad(name, msg);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo)) return bad(name, msg);
  out = static_cast<float>(x);
  return std::nullopt;
}

// An integer (JSON integers only: 10.0 is not one) within [lo, hi].
std::optional<ApiError> get_int(const json& obj, const char* name, int64_t lo, int64_t hi, const char* range,
                                int64_t& out, bool& present) {
  present = false;
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  const std::string msg = std::string("'") + name + "' must be an integer " + range;
  if (!v->is_number_integer()) return bad(name, msg);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    return bad(name, msg);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return bad(name, msg);
  out = x;
  present = true;
  return std::nullopt;
}

// max_tokens, or its newer name max_completion_tokens, or llama-server's
// n_predict: each is checked; the first present in that order wins.
std::optional<ApiError> parse_max_tokens(const json& j, int& out) {
  bool set = false;
  for (const char* name : {"max_completion_tokens", "max_tokens", "n_predict"}) {
    const json* v = field(j, name);
    if (!v) continue;
    const std::string msg = std::string("'") + name + "' must be an integer >= 1, or -1 for no limit";
    if (!v->is_number_integer()) return bad(name, msg);
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
      return bad(name, msg);
    const int64_t x = v->get<int64_t>();
    if (x != -1 && (x < 1 || x > std::numeric_limits<int>::max())) return bad(name, msg);
    if (!set) out = static_cast<int>(x);
    set = true;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_seed(const json& j, SamplingRequest& s) {
  const json* v = field(j, "seed");
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return bad("seed", "'seed' must be an integer (negative = random)");
  if (v->is_number_unsigned()) {
    s.has_seed = true;
    s.seed = v->get<uint64_t>();
  } else {
    const int64_t x = v->get<int64_t>();
    s.has_seed = x >= 0;  // like llama-server's -1: a fresh random seed per request
    s.seed = x >= 0 ? uint64_t(x) : 0;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& j, std::vector<std::string>& out) {
  const json* v = field(j, "stop");
  if (!v) return std::nullopt;
  const char* msg = "'stop' must be a non-empty string or an array of at most 4 non-empty strings";
  if (v->is_string()) {
    std::string s;
    if (auto e = get_string(*v, "stop", s)) return e;
    if (s.empty()) return bad("stop", msg);
    out.push_back(std::move(s));
    return std::nullopt;
  }
  if (!v->is_array() || v->size() > 4) return bad("stop", msg);
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string param = "stop[" + std::to_string(i) + "]";
    std::string s;
    if (!(*v)[i].is_string()) return bad(param, "'" + param + "' must be a non-empty string");
    if (auto e = get_string((*v)[i], param, s)) return e;
    if (s.empty()) return bad(param, "'" + param + "' must be a non-empty string");
    out.push_back(std::move(s));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& j, SamplingRequest& s) {
  if (auto e = parse_max_tokens(j, s.max_tokens)) return e;
  if (auto e = get_number(j, "temperature", 0, 2, false, "in [0, 2]", s.temperature)) return e;
  if (auto e = get_number(j, "top_p", 0, 1, true, "in (0, 1]", s.top_p)) return e;
  if (auto e = get_number(j, "min_p", 0, 1, false, "in [0, 1]", s.min_p)) return e;
  if (auto e = get_number(j, "presence_penalty", -2, 2, false, "in [-2, 2]", s.presence_penalty)) return e;
  if (auto e = get_number(j, "frequency_penalty", -2, 2, false, "in [-2, 2]", s.frequency_penalty)) return e;
  // Capped where a float holds it (1e300 would become inf).
  if (auto e = get_number(j, "repeat_penalty", 0, 1e6, true, "in (0, 1e6]",
                          s.repeat_penalty))
    return e;
  int64_t top_k = 0;
  bool present = false;
  if (auto e = get_int(j, "top_k", 0, std::numeric_limits<int>::max(), ">= 0", top_k, present)) return e;
  if (present) s.top_k = static_cast<int>(top_k);
  if (auto e = parse_seed(j, s)) return e;
  return parse_stop(j, s.stop);
}

// A message's content: a string, or an array of text parts joined (other part
// types, e.g. images, are not supported). Null is accepted for assistant turns,
// which OpenAI allows when the turn only called tools.
std::optional<ApiError> parse_content(const json* v, const std::string& role, const std::string& param,
                                      std::string& out) {
  if (!v) {
    if (role == "assistant") return std::nullopt;
    return bad(param, "'" + param + "' must be a string or an array of text parts");
  }
  if (v->is_string()) return get_string(*v, param, out);
  if (!v->is_array()) return bad(param, "'" + param + "' must be a string or an array of text parts");
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& part = (*v)[i];
    if (!part.is_object()) return bad(p, "'" + p + "' must be an object {\"type\": \"text\", \"text\": ...}");
    const json* type = field(part, "type");
    if (!type || !type->is_string() || type->get_ref<const std::string&>() != "text")
      return bad(p + ".type", "'" + p + ".type' must be \"text\" (only text content is supported)");
    const json* text = field(part, "text");
    if (!text) return bad(p + ".text", "'" + p + ".text' must be a string");
    std::string s;
    if (auto e = get_string(*text, p + ".text", s)) return e;
    out += s;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& j, std::vector<ChatMessage>& out) {
  const json* v = field(j, "messages");
  if (!v || !v->is_array() || v->empty()) return bad("messages", "'messages' must be a non-empty array");
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = (*v)[i];
    if (!m.is_object()) return bad(p, "'" + p + "' must be an object");
    ChatMessage msg;
    const json* role = field(m, "role");
    if (!role) return bad(p + ".role", "'" + p + ".role' must be a string");
    if (auto e = get_string(*role, p + ".role", msg.role)) return e;
    if (auto e = parse_content(field(m, "content"), msg.role, p + ".content", msg.content)) return e;
    out.push_back(std::move(msg));
  }
  if (Status s = validate_chat(out); !s.ok()) {
    // validate_chat names the field as 'messages[i].role' at the start of its message.
    const std::string& m = s.message();
    const size_t end = m.find('\'', 1);
    return bad(end != std::string::npos ? m.substr(1, end - 1) : "messages", m);
  }
  return std::nullopt;
}

// A prompt: a string, an array of token ids, or an array of exactly one string
// (several prompts would mean several completions, which we do not batch).
std::optional<ApiError> parse_prompt(const json& j, CompletionRequest& out) {
  const json* v = field(j, "prompt");
  const char* msg = "'prompt' must be a string, an array of token ids, or an array of one string";
  if (!v) return bad("prompt", msg);
  if (v->is_string()) return get_string(*v, "prompt", out.prompt);
  if (!v->is_array() || v->empty()) return bad("prompt", msg);
  if ((*v)[0].is_string()) {
    if (v->size() != 1) return bad("prompt", "'prompt' may hold only one string (n > 1 is not supported)");
    return get_string((*v)[0], "prompt[0]", out.prompt);
  }
  out.prompt_is_tokens = true;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    const std::string p = "prompt[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max() ||
        (t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())))
      return bad(p, "'" + p + "' must be a token id (an integer >= 0)");
    out.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}


json base_object(const std::string& id, int64_t created, const std::string& model, const char* object) {
  // Sanitized: these strings may come from a client or a GGUF file, and
  // dump() throws on ill-formed UTF-8.
  return json{{"id", utf8_sanitize(id)}, {"object", object}, {"created", created}, {"model", utf8_sanitize(model)}};
}

json usage(int prompt_tokens, int completion_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

json reason(const std::string& finish_reason) { return finish_reason.empty() ? json(nullptr) : json(finish_reason); }

}  // namespace

std::optional<ApiError> check_json_depth(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return bad("", "request body nests JSON arrays and objects deeper than the limit of " + std::to_string(max_depth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

std::string error_json(const ApiError& e) {
  json err{{"message", utf8_sanitize(e.message)},
           {"type", e.type},
           {"param", e.param.empty() ? json(nullptr) : json(utf8_sanitize(e.param))},
           {"code", e.status}};
  return json{{"error", err}}.dump();
}

std::optional<ApiError> parse_completion_request(std::string_view body, bool chat, CompletionRequest& out,
                                                 int max_depth) {
  out = CompletionRequest{};
  out.chat = chat;
  json j;
  if (auto e = parse_object(body, j, max_depth)) return e;
  if (const json* m = field(j, "model"))
    if (auto e = get_string(*m, "model", out.model)) return e;
  if (chat) {
    if (auto e = parse_messages(j, out.messages)) return e;
  } else {
    if (auto e = parse_prompt(j, out)) return e;
  }
  if (auto e = get_bool(j, "stream", out.stream)) return e;
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
    if (const json* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean())
        return bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
      out.include_usage = iu->get<bool>();
    }
  }
  if (const json* n = field(j, "n"))
    if (!n->is_number_integer() || n->get<int64_t>() != 1 || (n->is_number_unsigned() && n->get<uint64_t>() != 1))
      return bad("n", "'n' must be 1 (one completion per request)");
  return parse_sampling(j, out.sampling);
}

SamplerOptions sampler_options(const SamplingRequest& s, uint64_t random_seed) {
  SamplerOptions o;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.min_p = s.min_p;
  o.repeat_penalty = s.repeat_penalty;
  o.presence_penalty = s.presence_penalty;
  o.frequency_penalty = s.frequency_penalty;
  o.seed = s.has_seed ? s.seed : random_seed;
  return o;
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest& out, int max_depth) {
  out = TokenizeRequest{};
  json j;
  if (auto e = parse_object(body, j, max_depth)) return e;
  const json* c = field(j, "content");
  if (!c) return bad("content", "'content' must be a string");
  if (auto e = get_string(*c, "content", out.content)) return e;
  if (auto e = get_bool(j, "add_special", out.add_special)) return e;
  return get_bool(j, "with_pieces", out.with_pieces);
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, std::vector<int32_t>& tokens,
                                                 int32_t n_vocab, int max_depth) {
  tokens.clear();
  json j;
  if (auto e = parse_object(body, j, max_depth)) return e;
  const json* v = field(j, "tokens");
  if (!v || !v->is_array()) return bad("tokens", "'tokens' must be an array of token ids");
  const std::string range = "[0, " + std::to_string(n_vocab) + ")";
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    const std::string p = "tokens[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<uint64_t>() >= uint64_t(n_vocab)) ||
        t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      tokens.clear();
      return bad(p, "'" + p + "' must be a token id in " + range);
    }
    tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

std::string completion_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                            const std::string& finish_reason, int prompt_tokens, int completion_tokens, bool chat) {
  json j = base_object(id, created, model, chat ? "chat.completion" : "text_completion");
  json choice{{"index", 0}};
  if (chat) choice["message"] = json{{"role", "assistant"}, {"content", utf8_sanitize(text)}};
  else {
    choice["text"] = utf8_sanitize(text);
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = reason(finish_reason);
  j["choices"] = json::array({choice});
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return j.dump();
}

std::string chunk_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                       const std::string& finish_reason, bool chat, bool first) {
  json j = base_object(id, created, model, chat ? "chat.completion.chunk" : "text_completion");
  json choice{{"index", 0}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    // The closing chunk (finish_reason set) carries no content unless it has text.
    if (first || !text.empty() || finish_reason.empty()) delta["content"] = utf8_sanitize(text);
    choice["delta"] = delta;
  } else {
    choice["text"] = utf8_sanitize(text);
    choice["logprobs"] = nullptr;
  }
  choice["finish_reason"] = reason(finish_reason);
  j["choices"] = json::array({choice});
  return j.dump();
}

std::string usage_chunk_json(const std::string& id, int64_t created, const std::string& model, int prompt_tokens,
                             int completion_tokens, bool chat) {
  json j = base_object(id, created, model, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage(prompt_tokens, completion_tokens);
  return j.dump();
}

std::string sse(const std::string& json_text) { return "data: " + json_text + "\n\n"; }
std::string sse_done() { return "data: [DONE]\n\n"; }

std::string models_json(const std::string& model_id, int64_t created, int64_t n_ctx, int64_t n_vocab,
                        int64_t n_params) {
  json m{{"id", utf8_sanitize(model_id)},
         {"object", "model"},
         {"created", created},
         {"owned_by", "turbokv"},
         {"meta", json{{"n_ctx", n_ctx}, {"n_vocab", n_vocab}, {"n_params", n_params}}}};
  return json{{"object", "list"}, {"data", json::array({m})}}.dump();
}

std::string tokenize_json(const std::vector<int32_t>& ids, const std::vector<std::string>* pieces) {
  json toks = json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!pieces || i >= pieces->size()) {
      toks.push_back(ids[i]);
      continue;
    }
    const std::string& p = (*pieces)[i];
    json piece;
    if (utf8_valid(p)) piece = p;
    else {
      piece = json::array();  // part of a character: send its bytes
      for (unsigned char c : p) piece.push_back(int(c));
    }
    toks.push_back(json{{"id", ids[i]}, {"piece", piece}});
  }
  return json{{"tokens", toks}}.dump();
}

std::string detokenize_json(const std::string& content) { return json{{"content", utf8_sanitize(content)}}.dump(); }

}  // namespace tkv::server
