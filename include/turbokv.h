/* turbokv: a compressed KV cache and the engine around it, as a C library.
 *
 * Conventions (every function follows them):
 * - Functions that can fail return tkv_status. On failure the calling
 *   thread's message (tkv_last_error) names what was wrong: the argument, the
 *   file and field, the row and element. Nothing aborts, and no C++
 *   exception crosses this interface.
 * - Arrays are passed with explicit sizes: a function checks every size
 *   against what it will read or write and fails (TKV_ERR_ARGUMENT, or
 *   TKV_ERR_BUFFER when an output buffer is too small, with the size needed)
 *   rather than read or write past it.
 * - Handles are opaque. Each *_create/_load has a matching *_free that
 *   accepts NULL. A model must outlive the contexts made from it.
 * - Parameter structs start with struct_size: fill them from the matching
 *   *_default_params() function, which sets it, and change what you need.
 *   A struct from an older header (smaller struct_size) is accepted; its
 *   missing fields take their defaults.
 * - Thread safety is stated per function. In short: codecs and models are
 *   immutable once made and may be used from any number of threads at once;
 *   a cache, a context or a sampler is used by one thread at a time.
 * - Float arrays of rows are row-major: n rows of head_dim floats.
 *
 * Formats: f32 f16 bf16 q8_0 q4_0 q8_0r q4_0r tqB (B = 1..8) tqB.5 (B = 1..7),
 * tq formats with a -nc or -ip suffix, and tqcB (calibrated; made from rows
 * with tkv_codec_calibrate). Layouts are in docs/FORMATS.md.
 *
 * Link with `pkg-config --cflags --libs turbokv`. The library's soname
 * carries TKV_ABI_VERSION, which changes only when this interface breaks.
 */
#ifndef TURBOKV_H
#define TURBOKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TKV_VERSION_MAJOR 0
#define TKV_VERSION_MINOR 1
#define TKV_VERSION_PATCH 0
#define TKV_ABI_VERSION 1

/* The rotation seed tools use when none is given ("turbokv1"). */
#define TKV_DEFAULT_SEED UINT64_C(0x747572626f6b7631)

typedef enum tkv_status {
  TKV_OK = 0,
  TKV_ERR_ARGUMENT = 1,  /* a null pointer, bad size, shape, name or option */
  TKV_ERR_BUFFER = 2,    /* an output buffer is too small; the size needed was written */
  TKV_ERR_IO = 3,        /* a file could not be opened, read or written */
  TKV_ERR_FORMAT = 4,    /* a file is malformed, damaged, or made for another model or cache */
  TKV_ERR_VALUE = 5,     /* NaN, Inf or out-of-range values in the input, or in the logits */
  TKV_ERR_MEMORY = 6,    /* out of memory, or the cache is full */
  TKV_ERR_STOPPED = 7,   /* a callback asked to stop (what was done before stays done) */
  TKV_ERR_INTERNAL = 8   /* a bug in turbokv: please report the message */
} tkv_status;

/* The calling thread's message for its last failed call ("" if none). Valid
 * until that thread's next failing call. Thread-safe. */
const char* tkv_last_error(void);
/* A constant name for a status ("TKV_ERR_ARGUMENT"). Thread-safe. */
const char* tkv_status_name(tkv_status s);
/* "0.1.0". Thread-safe. */
const char* tkv_version(void);

/* ------------------------------------------------------------------ codecs
 * A codec turns rows of head_dim floats into row_bytes bytes and back.
 * Codecs are immutable: every function here is thread-safe, also on one
 * codec from several threads. */
typedef struct tkv_codec tkv_codec;

/* format: a name listed above (not tqc); head_dim: 8 to 1024 for rotated
 * formats; seed: the rotation (TKV_DEFAULT_SEED: the one the tools use). */
tkv_status tkv_codec_create(const char* format, int32_t head_dim, uint64_t seed, tkv_codec** out);
/* A calibrated codec (format "tqcB", B coded bits per value): fits the mean
 * and basis of n_rows rows (at least 2, finite) of head_dim floats. The codec
 * codes rows with the mean subtracted: quantize x - mean (tkv_codec_mean). */
tkv_status tkv_codec_calibrate(const char* format, int32_t head_dim, const float* rows, size_t n_rows,
                               tkv_codec** out);
void tkv_codec_free(tkv_codec* codec);

const char* tkv_codec_format(const tkv_codec* codec);   /* the name it was made with */
int32_t tkv_codec_head_dim(const tkv_codec* codec);
size_t tkv_codec_row_bytes(const tkv_codec* codec);
double tkv_codec_bits_per_value(const tkv_codec* codec); /* 8 * row_bytes / head_dim */
/* The mean a calibrated codec was fitted with (head_dim floats); zeros for
 * other codecs. n: the floats mean can hold. */
tkv_status tkv_codec_mean(const tkv_codec* codec, float* mean, size_t n);

/* Codes n_rows rows (n_rows * head_dim floats) into out (out_bytes >=
 * n_rows * row_bytes). A row with NaN or Inf, or a value outside the
 * format's range, fails with TKV_ERR_VALUE naming the row and element; rows
 * before it are written. */
tkv_status tkv_codec_quantize(const tkv_codec* codec, const float* x, size_t n_rows, uint8_t* out,
                              size_t out_bytes);
/* Decodes n_rows rows (n_rows * row_bytes bytes) into out (out_floats >=
 * n_rows * head_dim). */
tkv_status tkv_codec_dequantize(const tkv_codec* codec, const uint8_t* codes, size_t n_rows, float* out,
                                size_t out_floats);

/* The Lloyd-Max codebook tq formats use for one coordinate of a random unit
 * vector of dimension d (2..65536) at bits (1..8): 2^bits centroids and
 * 2^bits - 1 boundaries, ascending, and the expected squared error of one
 * coordinate. Either array may be NULL (then its size is not checked).
 * Thread-safe (computed once per (d, bits) and kept). */
tkv_status tkv_codebook(int32_t d, int32_t bits, double* centroids, size_t n_centroids, double* boundaries,
                        size_t n_boundaries, double* mse_coord);

/* The seeded orthogonal transform R the rotated formats (tqB, q8_0r, ...)
 * apply before coding, for head_dim (2 to 4096) and seed: a randomized
 * Hadamard transform H D / sqrt(d) when head_dim is a power of two, else a
 * dense Haar-random orthogonal matrix. Writes y = R x (inverse = 0) or
 * x = R^T y (inverse != 0) for n_rows rows of head_dim floats into out
 * (out_floats >= n_rows * head_dim; out must not overlap x). Thread-safe (the
 * transform is made once per (head_dim, seed) and kept). */
tkv_status tkv_rotate(int32_t head_dim, uint64_t seed, const float* x, size_t n_rows, int32_t inverse, float* out,
                      size_t out_floats);

/* --------------------------------------------------------------- attention
 * The fused kernel: softmax(q K^T * scale) V computed on the codes, without
 * decoding rows. Rows of token t and KV head h are at
 * codes + t * token_stride + h * head_stride (defaults, when 0: token_stride
 * = n_kv_heads * row_bytes, head_stride = row_bytes, i.e. [n_kv][n_kv_heads]
 * rows as a cache stores them). Thread-safe: the arguments are only read,
 * out is written. */
typedef struct tkv_attention_params {
  size_t struct_size;
  const float* q;          /* [n_q][n_q_heads][head_dim] */
  int32_t n_q, n_q_heads;
  int32_t n_kv, n_kv_heads; /* n_q_heads a multiple of n_kv_heads */
  int32_t head_dim;
  const tkv_codec* k_codec;  /* or k_head_codecs: one per KV head (calibrated) */
  const tkv_codec* const* k_head_codecs;
  const uint8_t* k_codes;
  size_t k_codes_bytes;     /* readable bytes at k_codes */
  size_t k_token_stride, k_head_stride;
  const tkv_codec* v_codec;
  const tkv_codec* const* v_head_codecs;
  const uint8_t* v_codes;
  size_t v_codes_bytes;
  size_t v_token_stride, v_head_stride;
  /* Rows hold codes of k - mu_k and v - mu_v ([n_kv_heads][head_dim] each),
   * or NULL: exact mean centring, the means added back exactly. */
  const float* mu_k;
  const float* mu_v;
  int32_t causal_offset;    /* query i sees tokens j <= causal_offset + i; < 0: all */
  float scale;              /* 0: 1 / sqrt(head_dim) */
  float sparse_v;           /* skip V rows weighted below this times the max (0: off) */
  int32_t threads;          /* 1 by default */
  float* out;               /* [n_q][n_q_heads][head_dim] */
  size_t out_floats;
  /* How tq/tqc rows are read: 0 the library's default (int8 scoring and
   * accumulation where the CPU has AVX-512 VBMI + VNNI and the format's
   * error budget allows; TKV_KEYS=exact in the environment turns it off),
   * 1 exact (every code decoded to f32), 2 int8. Added in 0.9 (older
   * callers' shorter structs read as 0). */
  int32_t key_scoring;
} tkv_attention_params;

tkv_attention_params tkv_attention_default_params(void);
tkv_status tkv_attention(const tkv_attention_params* p);

/* ----------------------------------------------------------------- caches
 * A KV cache of n_layer layers: K and V rows in their formats (per layer,
 * from a preset or a calibrated policy), with exact mean centring for tq
 * formats. One thread at a time per cache. */
typedef struct tkv_cache tkv_cache;

typedef struct tkv_cache_params {
  size_t struct_size;
  int32_t n_layer, n_kv_heads, head_dim;
  int32_t capacity;         /* tokens (default 4096) */
  const char* type_k;       /* default "tq4" */
  const char* type_v;       /* default "tq4" */
  int32_t mean_center;      /* exact mean centring for tq formats (default 1) */
  int32_t mean_tokens;      /* rows that fix the means (default 64) */
  uint64_t seed;            /* rotation seed (default TKV_DEFAULT_SEED) */
  const char* preset;       /* "quality", "balanced", "compact", "tiny", "tiny-e8", or NULL */
  const char* policy_path;  /* a file from `turbokv calibrate` / tkv_calibrate, or NULL */
} tkv_cache_params;

tkv_cache_params tkv_cache_default_params(void);
tkv_status tkv_cache_create(const tkv_cache_params* p, tkv_cache** out);
void tkv_cache_free(tkv_cache* cache);
/* Stores n tokens at positions [pos, pos + n) of one layer; k and v are
 * [n][n_kv_heads][head_dim] floats (k_floats, v_floats: their sizes).
 * Positions are written in order. A row with NaN or Inf is stored as zeros. */
tkv_status tkv_cache_append(tkv_cache* cache, int32_t layer, int32_t pos, int32_t n, const float* k,
                            size_t k_floats, const float* v, size_t v_floats);
int32_t tkv_cache_n_tokens(const tkv_cache* cache);
/* Tokens written to one layer so far (0 for a layer outside the cache). */
int32_t tkv_cache_layer_tokens(const tkv_cache* cache, int32_t layer);
/* Bytes the cache's K and V rows take at full capacity. */
size_t tkv_cache_bytes(const tkv_cache* cache);
/* Attention of n_q queries ([n_q][n_q_heads][head_dim]) at positions
 * [first_pos, first_pos + n_q) over layer's stored tokens, causal; out is
 * [n_q][n_q_heads][head_dim]. */
tkv_status tkv_cache_attention(const tkv_cache* cache, int32_t layer, const float* q, int32_t n_q,
                               int32_t n_q_heads, int32_t first_pos, float scale, int32_t threads, float* out,
                               size_t out_floats);

/* ----------------------------------------------------------------- models
 * A GGUF model (llama, qwen2, qwen3). A model is immutable: the tkv_model_*
 * and tokenizer functions are thread-safe. */
typedef struct tkv_model tkv_model;

tkv_status tkv_model_load(const char* path, tkv_model** out);
void tkv_model_free(tkv_model* model);
const char* tkv_model_arch(const tkv_model* model);
int32_t tkv_model_n_layer(const tkv_model* model);
int32_t tkv_model_n_head(const tkv_model* model);
int32_t tkv_model_n_head_kv(const tkv_model* model);
int32_t tkv_model_head_dim(const tkv_model* model);
int32_t tkv_model_n_vocab(const tkv_model* model);
int32_t tkv_model_n_ctx_train(const tkv_model* model);
int32_t tkv_model_bos(const tkv_model* model);
int32_t tkv_model_eos(const tkv_model* model);

/* The model's shape and hyperparameters as a JSON object (arch, n_layer,
 * n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train, eps,
 * rope_base, rope_scale, rope_dims, rope_neox, qkv_bias, qk_norm,
 * tied_output) into json (cap bytes, NUL-terminated); *json_len gets its
 * length; TKV_ERR_BUFFER when it does not fit. Thread-safe. */
tkv_status tkv_model_config_json(const tkv_model* model, char* json, size_t cap, size_t* json_len);
/* The GGUF file's tensors: their count, and the index-th one's name (valid
 * while the model lives), element type name ("F32", "Q8_0", ...) and dims
 * (ggml order: dims[0] is the contiguous one; up to 4, *n_dims of them).
 * Thread-safe. */
size_t tkv_model_n_tensors(const tkv_model* model);
tkv_status tkv_model_tensor_info(const tkv_model* model, size_t index, const char** name, const char** type,
                                 int64_t dims[4], int32_t* n_dims);
/* The tensor named name, decoded to floats (any weight type the engine
 * reads), in the file's order: n_elements floats, row-major with dims[0]
 * the contiguous one. out_floats must be >= its element count. Thread-safe. */
tkv_status tkv_model_tensor_f32(const tkv_model* model, const char* name, float* out, size_t out_floats);

/* Tokens of text (text_len bytes): *n_tokens gets the count; fails with
 * TKV_ERR_BUFFER when it exceeds cap (call again with a larger buffer).
 * add_bos: prepend BOS when the model's vocabulary asks for it. */
tkv_status tkv_tokenize(const tkv_model* model, const char* text, size_t text_len, int32_t add_bos,
                        int32_t* tokens, size_t cap, size_t* n_tokens);
/* The text of n tokens into text (cap bytes, NUL-terminated); *text_len gets
 * its length without the NUL; TKV_ERR_BUFFER when text_len + 1 > cap. */
tkv_status tkv_detokenize(const tkv_model* model, const int32_t* tokens, size_t n, char* text, size_t cap,
                          size_t* text_len);

/* --------------------------------------------------------------- contexts
 * One sequence on a model: its KV cache, the tokens it holds and the logits
 * of the last one. One thread at a time per context; several contexts of one
 * model may run on different threads. */
typedef struct tkv_context tkv_context;

typedef struct tkv_context_params {
  size_t struct_size;
  int32_t n_ctx;            /* tokens (default 4096, at most the model's trained context when known) */
  const char* type_k;       /* default "tq4" */
  const char* type_v;       /* default "tq4" */
  int32_t mean_center;      /* default 1 */
  const char* preset;       /* or NULL */
  const char* policy_path;  /* or NULL (a policy calibrated on this model) */
  int32_t threads;          /* 0: every core */
  int32_t batch;            /* prompt tokens per forward pass (default 512) */
} tkv_context_params;

tkv_context_params tkv_context_default_params(void);
tkv_status tkv_context_create(const tkv_model* model, const tkv_context_params* p, tkv_context** out);
void tkv_context_free(tkv_context* ctx);
int32_t tkv_context_n_tokens(const tkv_context* ctx);
int32_t tkv_context_n_ctx(const tkv_context* ctx);
/* The tokens the context holds (n_tokens of them) into tokens (cap). */
tkv_status tkv_context_tokens(const tkv_context* ctx, int32_t* tokens, size_t cap, size_t* n_tokens);
/* Bits per value of the cache's K and V rows (averaged over layers). */
double tkv_context_k_bits(const tkv_context* ctx);
double tkv_context_v_bits(const tkv_context* ctx);
/* Evaluates n tokens after those held (in batches); the logits of the last
 * one are kept (tkv_context_logits). Fails with TKV_ERR_MEMORY past n_ctx,
 * TKV_ERR_ARGUMENT on a token outside the vocabulary, TKV_ERR_VALUE on
 * non-finite logits. */
tkv_status tkv_eval(tkv_context* ctx, const int32_t* tokens, size_t n);
/* The last evaluated token's logits (n_vocab floats), or NULL before any
 * evaluation. Valid until the context's next tkv_eval/generate/truncate/load. */
const float* tkv_context_logits(const tkv_context* ctx);
/* Keeps the first n tokens. Fails when the cache's means were fixed from
 * rows past n (a prefix shorter than mean_tokens); then nothing changes. */
tkv_status tkv_context_truncate(tkv_context* ctx, int32_t n);

/* --------------------------------------------------------------- sampling */
typedef struct tkv_sampler_params {
  size_t struct_size;
  float temperature;        /* 0: greedy (default 0.8) */
  int32_t top_k;            /* 0: off (default 40) */
  float top_p;              /* 1: off (default 0.95) */
  float min_p;              /* 0: off (default 0.05) */
  float repeat_penalty;     /* 1: off (default 1) */
  int32_t repeat_last_n;    /* default 64 */
  float presence_penalty, frequency_penalty; /* OpenAI's, 0: off */
  uint64_t seed;            /* default 42 */
} tkv_sampler_params;

tkv_sampler_params tkv_sampler_default_params(void);
typedef struct tkv_sampler tkv_sampler;
tkv_status tkv_sampler_create(const tkv_sampler_params* p, tkv_sampler** out);
void tkv_sampler_free(tkv_sampler* s);
/* Picks the next token from the context's logits, with its tokens as the
 * history of the repetition penalty. One thread at a time per sampler. */
tkv_status tkv_sample(tkv_sampler* s, const tkv_context* ctx, int32_t* token);

/* Called with each generated token and the text it completes (whole UTF-8
 * characters: a piece may be empty while a character is incomplete). When
 * generation ends with bytes still held (an incomplete character), one last
 * call with token -1 carries them as U+FFFD. Return non-zero to stop. */
typedef int (*tkv_token_callback)(int32_t token, const char* text, size_t text_len, void* user_data);

/* Evaluates prompt (text; BOS first when the context is empty and the model
 * asks for it), then samples up to n_predict tokens, stopping at the end of
 * sequence token, evaluating each one. *n_generated (may be NULL) gets the
 * count. callback may be NULL. Returns TKV_ERR_STOPPED when the callback
 * stopped it (the tokens so far stay in the context). */
tkv_status tkv_generate(tkv_context* ctx, const char* prompt, size_t prompt_len, int32_t n_predict,
                        const tkv_sampler_params* sampling, tkv_token_callback callback, void* user_data,
                        int32_t* n_generated);

/* ------------------------------------------------------------ cache files
 * A context's KV state saved as it is held (no re-encoding), with its tokens,
 * bound to the model, formats, seeds and policy; every section checksummed.
 * Saving is crash-safe: the old file stays until the new one is complete. */
tkv_status tkv_context_save(const tkv_context* ctx, const char* path);
/* Replaces the context's state with the file's. A file made by another
 * model, format, policy or seed, or damaged, fails (TKV_ERR_FORMAT) and
 * leaves the context as it was. The logits are those of no token until the
 * next tkv_eval (evaluate the last token again, or continue). */
tkv_status tkv_context_load(tkv_context* ctx, const char* path);

/* ---------------------------------------------------------- evaluation */
typedef struct tkv_perplexity_result {
  size_t struct_size;
  double ppl, ppl_err;      /* perplexity and its standard error */
  int32_t chunks;
  int64_t scored_tokens;
} tkv_perplexity_result;

/* llama-perplexity's method: chunks of n_ctx tokens (BOS first), the second
 * half of each scored; max_chunks 0 = all. The cache is made from p (its
 * n_ctx is replaced by the chunk length). Thread-safe on a shared model. */
tkv_status tkv_perplexity(const tkv_model* model, const char* text, size_t text_len, int32_t n_ctx,
                          int32_t max_chunks, const tkv_context_params* p, tkv_perplexity_result* result);

/* The error each format makes on n_heads x n_tokens vectors of head_dim
 * floats ([head][token][dim]), as `turbokv kv-stats --json` prints it: a
 * JSON array, one object per (format, centring). formats: comma-separated
 * names or "all"; mean_center: also measure with exact mean centring;
 * calibrated: fit tqc bases on each head's first half, measure on the second.
 * The JSON goes to json (cap bytes, NUL-terminated); *json_len gets its
 * length; TKV_ERR_BUFFER when it does not fit. Thread-safe. */
typedef struct tkv_kv_stats_params {
  size_t struct_size;
  const char* formats;      /* default "all" */
  const char* source;       /* names the data in the output (default "array") */
  int32_t mean_center;      /* default 1 */
  int32_t calibrated;       /* default 0 */
  int32_t queries;          /* random queries per head (default 64) */
  uint64_t seed;            /* default TKV_DEFAULT_SEED */
} tkv_kv_stats_params;

tkv_kv_stats_params tkv_kv_stats_default_params(void);
tkv_status tkv_kv_stats(const float* x, int32_t n_heads, int32_t n_tokens, int32_t head_dim,
                        const tkv_kv_stats_params* p, char* json, size_t cap, size_t* json_len);

/* ------------------------------------------------------------ calibration
 * Runs the model over text, fits per (layer, K/V, head) a basis and picks
 * the formats (a budget in bits per value spread by measured sensitivity, or
 * `bits` everywhere), and writes the policy for tkv_cache_params /
 * tkv_context_params. progress (may be NULL) gets one line per step; return
 * non-zero from it to stop (TKV_ERR_STOPPED, nothing written). */
typedef struct tkv_calibrate_params {
  size_t struct_size;
  int32_t tokens;           /* calibration tokens (default 8192) */
  int32_t n_ctx;            /* chunk length (default 512) */
  double budget;            /* average stored bits per value; 0: `bits` everywhere */
  double bits;              /* default 4.25 */
  int32_t kld_tokens;       /* tokens of the sensitivity runs (default 2048) */
  int32_t threads;          /* 0: every core */
  uint64_t seed;            /* default TKV_DEFAULT_SEED */
  int (*progress)(const char* line, void* user_data);
  void* user_data;
} tkv_calibrate_params;

tkv_calibrate_params tkv_calibrate_default_params(void);
tkv_status tkv_calibrate(const tkv_model* model, const char* text, size_t text_len, const tkv_calibrate_params* p,
                         const char* policy_path);

#ifdef __cplusplus
}
#endif

#endif /* TURBOKV_H */
