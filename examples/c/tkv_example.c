/* Using turbokv from C: a codec round trip, the fused attention kernel on
 * the codes, and (given a GGUF model) greedy generation on a tq4 KV cache.
 *
 *   cc -std=c99 -Wall -Werror tkv_example.c $(pkg-config --cflags --libs turbokv) -o tkv_example
 *   ./tkv_example [MODEL.gguf]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbokv.h>

#define D 128
#define ROWS 256

static int failed(const char* what, tkv_status s) {
  fprintf(stderr, "%s failed: %s: %s\n", what, tkv_status_name(s), tkv_last_error());
  return 1;
}

/* Roughly Gaussian values (the sum of four uniforms), reproducible. */
static float noise(unsigned* state) {
  float sum = 0.0f;
  for (int i = 0; i < 4; ++i) {
    *state = *state * 1664525u + 1013904223u;
    sum += (float)(*state >> 8) / 16777216.0f - 0.5f;
  }
  return sum * 1.7f;
}

static int print_token(int32_t token, const char* text, size_t len, void* user) {
  (void)token;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  ++*(int*)user;
  return 0; /* non-zero would stop generation */
}

static int codec_demo(void) {
  tkv_codec* codec = NULL;
  tkv_status s = tkv_codec_create("tq4", D, TKV_DEFAULT_SEED, &codec);
  if (s != TKV_OK) return failed("tkv_codec_create", s);
  const size_t row_bytes = tkv_codec_row_bytes(codec);
  float* x = malloc(sizeof(float) * ROWS * D);
  float* y = malloc(sizeof(float) * ROWS * D);
  uint8_t* codes = malloc(row_bytes * ROWS);
  unsigned state = 1;
  for (size_t i = 0; i < (size_t)ROWS * D; ++i) x[i] = noise(&state);

  int rc = 0;
  s = tkv_codec_quantize(codec, x, ROWS, codes, row_bytes * ROWS);
  if (s == TKV_OK) s = tkv_codec_dequantize(codec, codes, ROWS, y, (size_t)ROWS * D);
  if (s != TKV_OK) {
    rc = failed("quantize/dequantize", s);
  } else {
    double err = 0.0, energy = 0.0;
    for (size_t i = 0; i < (size_t)ROWS * D; ++i) {
      err += (double)(x[i] - y[i]) * (x[i] - y[i]);
      energy += (double)x[i] * x[i];
    }
    printf("codec %s, d = %d: %zu bytes per row (%.3f bits per value), relative MSE %.5f\n",
           tkv_codec_format(codec), D, row_bytes, tkv_codec_bits_per_value(codec), err / energy);

    /* One query per head (4 query heads on 2 KV heads) over 128 tokens of
     * the codes: rows [token][kv head] as a cache holds them. */
    float q[4 * D], out[4 * D];
    for (int i = 0; i < 4 * D; ++i) q[i] = noise(&state);
    tkv_attention_params a = tkv_attention_default_params();
    a.q = q;
    a.n_q = 1;
    a.n_q_heads = 4;
    a.n_kv = ROWS / 2;
    a.n_kv_heads = 2;
    a.head_dim = D;
    a.k_codec = a.v_codec = codec;
    a.k_codes = a.v_codes = codes;
    a.k_codes_bytes = a.v_codes_bytes = row_bytes * ROWS;
    a.out = out;
    a.out_floats = 4 * D;
    s = tkv_attention(&a);
    if (s != TKV_OK) rc = failed("tkv_attention", s);
    else printf("attention on the codes: out[0][0..2] = %.4f %.4f %.4f\n", out[0], out[1], out[2]);
  }

  /* Errors are values with a message naming what was wrong. */
  tkv_codec* bad = NULL;
  s = tkv_codec_create("tq9", D, TKV_DEFAULT_SEED, &bad);
  printf("an unknown format: %s (%s)\n", tkv_status_name(s), tkv_last_error());
  if (s == TKV_OK) rc = 1;

  free(x);
  free(y);
  free(codes);
  tkv_codec_free(codec);
  return rc;
}

static int generate_demo(const char* path) {
  tkv_model* model = NULL;
  tkv_status s = tkv_model_load(path, &model);
  if (s != TKV_OK) return failed("tkv_model_load", s);
  tkv_context_params cp = tkv_context_default_params();
  cp.type_k = "tq4";
  cp.type_v = "tq4";
  cp.n_ctx = 256;
  tkv_context* ctx = NULL;
  s = tkv_context_create(model, &cp, &ctx);
  if (s != TKV_OK) {
    tkv_model_free(model);
    return failed("tkv_context_create", s);
  }
  tkv_sampler_params sp = tkv_sampler_default_params();
  sp.temperature = 0.0f; /* greedy */
  const char* prompt = "Once upon a time";
  int shown = 0;
  int32_t made = 0;
  printf("%s", prompt);
  s = tkv_generate(ctx, prompt, strlen(prompt), 24, &sp, print_token, &shown, &made);
  printf("\n");
  int rc = 0;
  if (s != TKV_OK) rc = failed("tkv_generate", s);
  else
    printf("generated %d tokens on a KV cache of %.2f (K) / %.2f (V) bits per value; %d tokens held\n", made,
           tkv_context_k_bits(ctx), tkv_context_v_bits(ctx), tkv_context_n_tokens(ctx));
  tkv_context_free(ctx);
  tkv_model_free(model);
  return rc;
}

int main(int argc, char** argv) {
  printf("turbokv %s\n", tkv_version());
  int rc = codec_demo();
  if (argc > 1 && rc == 0) rc = generate_demo(argv[1]);
  return rc;
}
