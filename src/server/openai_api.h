// The OpenAI-compatible HTTP API of `turbokv serve` without the HTTP and the
// engine: request bodies are parsed and validated into plain structs, and the
// response bodies are built as JSON text, following OpenAI's API and
// llama-server's extensions (n_predict, top_k, min_p, repeat_penalty,
// /tokenize, /detokenize). Errors are values: an ApiError naming the field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/sampler.h"
#include "text/chat_template.h"

namespace tkv::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field ("temperature", "messages[1].content"); empty = none
};

// {"error":{"message":...,"type":...,"param":... or null,"code":status}}
std::string error_json(const ApiError& e);

struct SamplingRequest {
  int max_tokens = -1;  // -1 = until the context is full
  float temperature = 0.8f;
  float top_p = 0.95f;
  int top_k = 40;
  float min_p = 0.05f;
  float presence_penalty = 0, frequency_penalty = 0, repeat_penalty = 1.0f;
  bool has_seed = false;  // false: the server picks a random seed
  uint64_t seed = 0;
  std::vector<std::string> stop;
};

struct CompletionRequest {
  bool chat = false;  // /v1/chat/completions (messages) or /v1/completions (prompt)
  std::string model;
  std::string prompt;                 // completions, text prompt
  std::vector<int32_t> prompt_tokens;  // completions, token-id prompt (ids not yet checked against the vocabulary)
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;  // chat
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  SamplingRequest sampling;
};

// Parses a /v1/completions (chat = false) or /v1/chat/completions body.
// Returns nothing on success; unknown fields are ignored and a JSON null
// counts as absent.
// JSON nested deeper than max_depth arrays and objects is refused before
// it is parsed (a deeply nested body costs far more memory than its bytes).
constexpr int kMaxJsonDepth = 64;
std::optional<ApiError> check_json_depth(std::string_view body, int max_depth = kMaxJsonDepth);

std::optional<ApiError> parse_completion_request(std::string_view body, bool chat, CompletionRequest& out,
                                                 int max_depth = kMaxJsonDepth);

// The sampler settings of a request; random_seed is used when it has none.
SamplerOptions sampler_options(const SamplingRequest& s, uint64_t random_seed);

// llama-server's POST /tokenize: {"content": "...", "add_special": bool, "with_pieces": bool}
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest& out,
                                               int max_depth = kMaxJsonDepth);

// llama-server's POST /detokenize: {"tokens": [ids]}; ids outside [0, n_vocab) are errors.
std::optional<ApiError> parse_detokenize_request(std::string_view body, std::vector<int32_t>& tokens, int32_t n_vocab,
                                                 int max_depth = kMaxJsonDepth);

// Non-streamed response: "text_completion" or "chat.completion" with usage.
// finish_reason: "stop" or "length".
std::string completion_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                            const std::string& finish_reason, int prompt_tokens, int completion_tokens, bool chat);

// One streamed chunk. Chat: the first chunk's delta carries the role; a chunk
// with a finish_reason (the last) has an empty delta unless it is also first or
// carries text. finish_reason empty = null (more to come).
std::string chunk_json(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                       const std::string& finish_reason, bool chat, bool first);

// The extra chunk sent when stream_options.include_usage is set: choices [] and usage.
std::string usage_chunk_json(const std::string& id, int64_t created, const std::string& model, int prompt_tokens,
                             int completion_tokens, bool chat);

// Server-sent events framing.
std::string sse(const std::string& json);
std::string sse_done();

// GET /v1/models: one model, with llama-server-style meta.
std::string models_json(const std::string& model_id, int64_t created, int64_t n_ctx, int64_t n_vocab, int64_t n_params);

// Tokenize / detokenize responses: {"tokens":[...]} (with pieces: [{"id":..,"piece":".."}])
// and {"content":"..."}. Pieces that are not valid UTF-8 are sent as byte arrays,
// as llama-server does.
std::string tokenize_json(const std::vector<int32_t>& ids, const std::vector<std::string>* pieces);
std::string detokenize_json(const std::string& content);

}  // namespace tkv::server
