// turbokv.Model: a GGUF model with one context (its compressed KV cache):
// tokenize, generate, evaluate, perplexity, cache files and calibration,
// over the C API. Long calls release the GIL; the per-token callback of
// generate() takes it back for the Python function.
#include <pybind11/stl.h>

#include "python/py_common.h"

namespace tkv_py {
namespace {

// Model text may hold bytes that are not UTF-8: replaced, never an error
// (call with the GIL held).
py::str utf8(const char* s, size_t n) {
  PyObject* o = PyUnicode_DecodeUTF8(s, static_cast<Py_ssize_t>(n), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

// Bytes of text for a callback, turned into str once the GIL is held.
struct Text {
  const char* p;
  size_t n;
};
inline py::object to_py(Text t) { return utf8(t.p, t.n); }
template <typename T>
T&& to_py(T&& v) {
  return std::forward<T>(v);
}

// A Python function called back from a C call that runs without the GIL:
// takes the GIL, returns 1 (stop) when the function returns something
// truthy, and when it raises, keeps the exception (raise_if_failed() raises
// it once the C call is over) and returns 1 so that the C call stops.
struct PyCallback {
  const py::object* fn;
  bool failed = false;
  template <typename... A>
  int operator()(A&&... args) {
    if (fn->is_none()) return 0;
    py::gil_scoped_acquire gil;
    try {
      return py::bool_((*fn)(to_py(std::forward<A>(args))...)) ? 1 : 0;
    } catch (py::error_already_set& e) {
      e.restore();
      failed = true;
      return 1;
    } catch (const std::exception& e) {  // a conversion error: no C++ exception may cross the C API
      PyErr_SetString(PyExc_RuntimeError, e.what());
      failed = true;
      return 1;
    }
  }
  void raise_if_failed() const {
    if (failed) throw py::error_already_set();
  }
};

class Model {
 public:
  Model(const std::string& path, const std::string& cache, const py::object& cache_v, int ctx, int threads,
        const py::object& preset, const py::object& policy, bool mean_center, int batch) {
    {
      py::gil_scoped_release nogil;
      status_ = tkv_model_load(path.c_str(), &model_);
    }
    check(status_);
    params_ = tkv_context_default_params();
    type_k_ = cache;
    type_v_ = cache_v.is_none() ? cache : cache_v.cast<std::string>();
    if (!preset.is_none()) preset_ = preset.cast<std::string>();
    if (!policy.is_none()) policy_ = policy.cast<std::string>();
    params_.type_k = type_k_.c_str();
    params_.type_v = type_v_.c_str();
    params_.preset = preset.is_none() ? nullptr : preset_.c_str();
    params_.policy_path = policy.is_none() ? nullptr : policy_.c_str();
    params_.mean_center = mean_center;
    params_.threads = threads;
    params_.batch = batch;
    if (ctx > 0) params_.n_ctx = ctx;
    check(tkv_context_create(model_, &params_, &ctx_));
  }
  ~Model() {
    tkv_context_free(ctx_);
    tkv_model_free(model_);
  }
  Model(const Model&) = delete;

  std::vector<int32_t> tokenize(const std::string& text, bool bos) const {
    std::vector<int32_t> ids(text.size() + 2);
    size_t n = 0;
    tkv_status s = tkv_tokenize(model_, text.data(), text.size(), bos, ids.data(), ids.size(), &n);
    if (s == TKV_ERR_BUFFER) {
      ids.resize(n);
      s = tkv_tokenize(model_, text.data(), text.size(), bos, ids.data(), ids.size(), &n);
    }
    check(s);
    ids.resize(n);
    return ids;
  }

  py::str detokenize(const std::vector<int32_t>& ids) const {
    std::vector<char> buf(16 * ids.size() + 16);
    size_t len = 0;
    tkv_status s = tkv_detokenize(model_, ids.data(), ids.size(), buf.data(), buf.size(), &len);
    if (s == TKV_ERR_BUFFER) {
      buf.resize(len + 1);
      s = tkv_detokenize(model_, ids.data(), ids.size(), buf.data(), buf.size(), &len);
    }
    check(s);
    return utf8(buf.data(), len);
  }

  void reset() { check(tkv_context_truncate(ctx_, 0)); }

  // Evaluates tokens after those held; returns the last one's logits.
  py::array_t<float> eval(const std::vector<int32_t>& tokens) {
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_eval(ctx_, tokens.data(), tokens.size());
    }
    check(s);
    return logits();
  }

  py::object logits() const {
    const float* l = tkv_context_logits(ctx_);
    if (!l) return py::none();
    const int V = tkv_model_n_vocab(model_);
    return py::array_t<float>(V, l);
  }

  std::vector<int32_t> tokens() const {
    std::vector<int32_t> t(tkv_context_n_tokens(ctx_));
    size_t n = 0;
    check(tkv_context_tokens(ctx_, t.data(), t.size(), &n));
    return t;
  }

  // Generates from prompt on an empty context (keep=False) or after what the
  // context holds; callback(token_id, text) -> truthy stops.
  py::str generate(const std::string& prompt, int n, float temperature, int top_k, float top_p, float min_p,
                   float repeat_penalty, uint64_t seed, const py::object& callback, bool keep) {
    if (!keep) reset();
    tkv_sampler_params sp = tkv_sampler_default_params();
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.top_p = top_p;
    sp.min_p = min_p;
    sp.repeat_penalty = repeat_penalty;
    sp.seed = seed;
    struct State {
      std::string text;
      PyCallback call;
    } st{{}, {&callback}};
    auto cb = [](int32_t token, const char* t, size_t len, void* user) -> int {
      auto* s = static_cast<State*>(user);
      s->text.append(t, len);
      return s->call(token, Text{t, len});
    };
    int32_t made = 0;
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_generate(ctx_, prompt.data(), prompt.size(), n, &sp, cb, &st, &made);
    }
    st.call.raise_if_failed();
    if (s != TKV_ERR_STOPPED) check(s);
    return utf8(st.text.data(), st.text.size());
  }

  py::dict perplexity(const std::string& text, int n_ctx, int chunks) const {
    tkv_perplexity_result r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    tkv_context_params p = params_;
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_perplexity(model_, text.data(), text.size(), n_ctx, chunks, &p, &r);
    }
    check(s);
    py::dict d;
    d["ppl"] = r.ppl;
    d["ppl_err"] = r.ppl_err;
    d["chunks"] = r.chunks;
    d["scored_tokens"] = r.scored_tokens;
    return d;
  }

  void save(const std::string& path) const { check(tkv_context_save(ctx_, path.c_str())); }
  void load(const std::string& path) { check(tkv_context_load(ctx_, path.c_str())); }

  void calibrate(const std::string& text, const std::string& policy_path, double budget, double bits, int tokens,
                 int n_ctx, int kld_tokens, const py::object& progress) const {
    tkv_calibrate_params p = tkv_calibrate_default_params();
    p.budget = budget;
    p.bits = bits;
    p.tokens = tokens;
    p.n_ctx = n_ctx;
    p.kld_tokens = kld_tokens;
    p.threads = params_.threads;
    PyCallback call{&progress};
    p.user_data = &call;
    p.progress = [](const char* line, void* user) -> int {
      return (*static_cast<PyCallback*>(user))(Text{line, std::strlen(line)});
    };
    tkv_status s;
    {
      py::gil_scoped_release nogil;
      s = tkv_calibrate(model_, text.data(), text.size(), &p, policy_path.c_str());
    }
    call.raise_if_failed();
    check(s);
  }

  py::object config() const {
    size_t len = 0;
    std::vector<char> buf(4096);
    tkv_status s = tkv_model_config_json(model_, buf.data(), buf.size(), &len);
    if (s == TKV_ERR_BUFFER) {
      buf.resize(len + 1);
      s = tkv_model_config_json(model_, buf.data(), buf.size(), &len);
    }
    check(s);
    return py::module_::import("json").attr("loads")(py::str(buf.data(), len));
  }

  // name -> (type, shape) with the shape row-major (the GGUF dims reversed).
  py::dict tensors() const {
    py::dict d;
    const size_t n = tkv_model_n_tensors(model_);
    for (size_t i = 0; i < n; ++i) {
      const char* name = nullptr;
      const char* type = nullptr;
      int64_t dims[4];
      int32_t nd = 0;
      check(tkv_model_tensor_info(model_, i, &name, &type, dims, &nd));
      py::list shape;
      for (int j = nd - 1; j >= 0; --j) shape.append(dims[j]);
      d[py::str(name)] = py::make_tuple(std::string(type), py::tuple(shape));
    }
    return d;
  }

  py::array_t<float> tensor(const std::string& name) const {
    const size_t n = tkv_model_n_tensors(model_);
    for (size_t i = 0; i < n; ++i) {
      const char* tn = nullptr;
      int64_t dims[4];
      int32_t nd = 0;
      check(tkv_model_tensor_info(model_, i, &tn, nullptr, dims, &nd));
      if (name != tn) continue;
      std::vector<py::ssize_t> shape;
      for (int j = nd - 1; j >= 0; --j) shape.push_back(static_cast<py::ssize_t>(dims[j]));
      auto out = new_array<float>(shape);
      float* o = out.mutable_data();
      tkv_status s;
      {
        py::gil_scoped_release nogil;
        s = tkv_model_tensor_f32(model_, name.c_str(), o, static_cast<size_t>(out.size()));
      }
      check(s);
      return out;
    }
    throw py::key_error("no tensor named '" + name + "' in the model (see Model.tensors)");
  }

  py::dict info() const {
    py::dict d;
    d["arch"] = std::string(tkv_model_arch(model_));
    d["n_layer"] = tkv_model_n_layer(model_);
    d["n_head"] = tkv_model_n_head(model_);
    d["n_head_kv"] = tkv_model_n_head_kv(model_);
    d["head_dim"] = tkv_model_head_dim(model_);
    d["n_vocab"] = tkv_model_n_vocab(model_);
    d["n_ctx_train"] = tkv_model_n_ctx_train(model_);
    d["n_ctx"] = tkv_context_n_ctx(ctx_);
    d["k_bits_per_value"] = tkv_context_k_bits(ctx_);
    d["v_bits_per_value"] = tkv_context_v_bits(ctx_);
    d["bos"] = tkv_model_bos(model_);
    d["eos"] = tkv_model_eos(model_);
    return d;
  }

 private:
  tkv_model* model_ = nullptr;
  tkv_context* ctx_ = nullptr;
  tkv_context_params params_{};
  std::string type_k_, type_v_, preset_, policy_;
  tkv_status status_ = TKV_OK;
};

}  // namespace

void bind_model(py::module_& m) {
  py::class_<Model>(m, "Model",
                    "A GGUF model (llama, qwen2, qwen3) with one context on a compressed KV cache. "
                    "Its tokenizer, hyperparameters (config) and weights (tensor(name): float32 arrays) are "
                    "there for your own forward pass (examples/torch_llama.py). info reports the cache's "
                    "bits per stored value. Use one Model from one thread at a time.")
      .def(py::init<const std::string&, const std::string&, const py::object&, int, int, const py::object&,
                    const py::object&, bool, int>(),
           py::arg("path"), py::arg("cache") = "tq4", py::arg("cache_v") = py::none(), py::arg("ctx") = 0,
           py::arg("threads") = 0, py::arg("preset") = py::none(), py::arg("policy") = py::none(),
           py::arg("mean_center") = true, py::arg("batch") = 512,
           "Model(path, cache='tq4'): cache is the K (and V, unless cache_v) format; ctx 0: 4096 or the "
           "model's trained context if smaller; threads 0: every core; preset ('quality', 'balanced', "
           "'compact') or policy (a calibrated policy file) replace the formats.")
      .def_property_readonly("info", &Model::info,
                             "dict: arch, n_layer, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train, n_ctx, "
                             "k_bits_per_value, v_bits_per_value (bits per stored value), bos, eos")
      .def_property_readonly("config", &Model::config,
                             "dict: the model's shape and hyperparameters (n_embd, n_ff, eps, rope_base, "
                             "rope_scale, rope_dims, rope_neox, qkv_bias, qk_norm, tied_output, ...)")
      .def_property_readonly("tensors", &Model::tensors,
                             "dict: GGUF tensor name -> (type name, shape row-major, e.g. (n_vocab, n_embd))")
      .def("tensor", &Model::tensor, py::arg("name"),
           "The named GGUF tensor decoded to a new float32 array of its row-major shape (the GGUF dims "
           "reversed: a [n_embd, n_vocab] ggml tensor is float32[n_vocab, n_embd]); KeyError if absent")
      .def("tokenize", &Model::tokenize, py::arg("text"), py::arg("bos") = true,
           "The token ids (list of int) of text; bos: BOS first when the model's vocabulary asks for it")
      .def("detokenize", &Model::detokenize, py::arg("tokens"),
           "The text of a list of token ids (bytes that are not UTF-8 replaced, never an error)")
      .def("generate", &Model::generate, py::arg("prompt"), py::arg("n") = 64, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("min_p") = 0.05f,
           py::arg("repeat_penalty") = 1.0f, py::arg("seed") = 42, py::arg("callback") = py::none(),
           py::arg("keep") = false,
           "Generates up to n tokens after prompt and returns the text; temperature 0 is greedy. "
           "callback(token, text) gets each token (a truthy return stops). keep=True continues the "
           "context instead of starting empty.")
      .def("eval", &Model::eval, py::arg("tokens"), "Evaluates tokens after the context's; returns the logits")
      .def_property_readonly("logits", &Model::logits,
                             "float32[n_vocab] logits of the last evaluated token, or None before any")
      .def_property_readonly("tokens", &Model::tokens, "list of the token ids the context holds")
      .def("reset", &Model::reset, "Empties the context")
      .def("perplexity", &Model::perplexity, py::arg("text"), py::arg("n_ctx") = 512, py::arg("chunks") = 0,
           "llama-perplexity's method on the model's cache formats: {'ppl', 'ppl_err', 'chunks', "
           "'scored_tokens'}")
      .def("save", &Model::save, py::arg("path"), "Saves the context's KV cache and tokens (a cache file)")
      .def("load", &Model::load, py::arg("path"), "Restores a saved context (same model and cache formats)")
      .def("calibrate", &Model::calibrate, py::arg("text"), py::arg("policy_path"), py::arg("budget") = 0.0,
           py::arg("bits") = 4.25, py::arg("tokens") = 8192, py::arg("n_ctx") = 512, py::arg("kld_tokens") = 2048,
           py::arg("progress") = py::none(),
           "Calibrates per-layer KV formats on text and writes the policy file (Model(policy=...)).");
}

}  // namespace tkv_py
