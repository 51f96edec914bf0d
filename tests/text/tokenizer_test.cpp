// Tokenizers against llama.cpp's own test suites (../shared/data/tokenizer):
// every case encodes to the expected ids and decodes back to its text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/gen_model.h"
#include "model/tokenizer_gguf.h"
#include "text/cpt_regex.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "shared_data.h"
#include "temp_path.h"

namespace tkv {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Cases are separated by lines "__ggml_vocab_test__"; each case's own final
// newline belongs to the separator.
std::vector<std::string> read_cases(const std::string& path) {
  const std::string all = slurp(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t start = 0;
  while (true) {
    const size_t p = all.find(sep, start);
    if (p == std::string::npos) break;
    cases.push_back(all.substr(start, p - start));
    start = p + sep.size();
  }
  return cases;
}

std::vector<std::vector<int32_t>> read_expected(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    int32_t id;
    while (ls >> id) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

void check_vocab(const std::string& name) {
  const std::string base = std::string(TKV_SHARED_DIR) + "/data/tokenizer/ggml-vocab-" + name + ".gguf";
  TKV_NEED_SHARED(base, base + ".inp", base + ".out");
  auto f = gguf::File::open(base);
  ASSERT_TRUE(f.ok()) << f.error();
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.error();
  const auto cases = read_cases(base + ".inp");
  const auto expected = read_expected(base + ".out");
  ASSERT_GT(cases.size(), 20u);
  ASSERT_EQ(cases.size(), expected.size()) << name;
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tok->encode(cases[i], /*add_bos=*/false);
    EXPECT_EQ(ids, expected[i]) << name << " case " << i << ": '" << cases[i] << "'";
    EXPECT_EQ(tok->decode(ids), cases[i]) << name << " case " << i;
    failures += ids != expected[i];
  }
  EXPECT_EQ(failures, 0);
}

TEST(Tokenizer, LlamaSpmMatchesLlamaCppSuite) { check_vocab("llama-spm"); }
TEST(Tokenizer, Phi3MatchesLlamaCppSuite) { check_vocab("phi-3"); }
TEST(Tokenizer, Gpt2MatchesLlamaCppSuite) { check_vocab("gpt-2"); }
TEST(Tokenizer, StarcoderMatchesLlamaCppSuite) { check_vocab("starcoder"); }
TEST(Tokenizer, FalconMatchesLlamaCppSuite) { check_vocab("falcon"); }
TEST(Tokenizer, DeepseekLlmMatchesLlamaCppSuite) { check_vocab("deepseek-llm"); }

TEST(Tokenizer, BosAndSpecialTokens) {
  const std::string path = std::string(TKV_SHARED_DIR) + "/data/tokenizer/ggml-vocab-llama-spm.gguf";
  TKV_NEED_SHARED(path);
  auto f = gguf::File::open(path);
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->encode("", true), (std::vector<int32_t>{1}));
  // "<s>" is text unless special parsing is on.
  EXPECT_NE(tok->encode("<s>", false)[0], 1);
  EXPECT_EQ(tok->encode("<s>Hello", false, true), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tok->decode({1, 15043, 3186, 2}), "Hello world");
}

// The SentencePiece settings of Gemma and Phi-3 GGUFs (llama.cpp's SPM
// path): Gemma's converter writes add_space_prefix = false; add_eos_token
// appends EOS; a vocabulary named Phi-3 drops the whitespace after a special
// token (llama.cpp gives its special tokens rstrip), then the space prefix
// goes before the text as after any special token.
TEST(Tokenizer, GemmaAndPhi3SentencePieceSettings) {
  auto make = [](const std::string& name, bool space_prefix, bool eos) {
    gguf::Writer w;
    w.add_string("general.name", name);
    w.add_string("tokenizer.ggml.model", "llama");
    // ids: 0 <unk>, 1 <s>, 2 </s>, 3 <|user|> (user-defined), 4.. pieces
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<|user|>", "\xe2\x96\x81", "a", "b",
                                                 "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab"});
    w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, -4, -5, -6});
    w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 4, 1, 1, 1, 1, 1, 1});
    w.add_bool("tokenizer.ggml.add_space_prefix", space_prefix);
    w.add_bool("tokenizer.ggml.add_eos_token", eos);
    const std::string path = testing::TempDir() + std::to_string(getpid()) + "_tkv_spm_" + name + ".gguf";
    EXPECT_TRUE(w.write(path).ok());
    auto f = gguf::File::open(path);
    EXPECT_TRUE(f.ok());
    auto tok = tokenizer_from_gguf(**f);
    EXPECT_TRUE(tok.ok()) << tok.error();
    std::remove(path.c_str());
    return *tok;
  };
  const Tokenizer gemma = make("gemma-3-1b-it", false, true);
  EXPECT_EQ(gemma.encode("ab", true), (std::vector<int32_t>{1, 8, 2})) << "no space prefix, EOS appended";
  EXPECT_EQ(gemma.encode("ab", false), (std::vector<int32_t>{8}));
  const Tokenizer phi3 = make("Phi-3-mini-4k-instruct", true, false);
  EXPECT_EQ(phi3.encode("ab", true), (std::vector<int32_t>{1, 9})) << "space prefix";
  EXPECT_EQ(phi3.encode("<|user|>  ab", false), (std::vector<int32_t>{3, 9})) << "whitespace after the special dropped";
  const Tokenizer plain = make("llama", true, false);
  EXPECT_EQ(plain.encode("<|user|> ab", false), (std::vector<int32_t>{3, 4, 9})) << "kept elsewhere";
}

TEST(Tokenizer, UnsupportedModelIsAClearError) {
  gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "rwkv");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  const TempPath path("tkv_rwkv_vocab.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok());
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().find("rwkv"), std::string::npos) << tok.error();
}

// Pre-tokenizers without a vocabulary suite here: the splits of the regexes.
// The splits of the published pre-tokenizer regexes (GPT-2, Llama 3, Qwen2,
// and DeepSeek LLM's six applied in turn), computed by Python's `regex` module (scripts/gen-pretokenize-cases.py wrote the fixture from the
// suites' inputs, WikiText-2 lines and mixed-script strings): an
// implementation independent of our hand-written splitters.
TEST(Tokenizer, PreTokenizersSplitAsTheRegexesDoInAnotherEngine) {
  std::ifstream in(std::string(TKV_SOURCE_DIR) + "/tests/data/pretokenize_cases.json", std::ios::binary);
  ASSERT_TRUE(in) << "tests/data/pretokenize_cases.json";
  const auto j = nlohmann::json::parse(in);
  const auto& cases = j.at("cases");
  ASSERT_GT(cases.size(), 300u);
  using P = PreTokenizer;
  const std::pair<const char*, PreTokenizer> kinds[] = {
      {"gpt2", P::kGpt2},         {"llama3", P::kLlama3},         {"qwen2", P::kQwen2},
      {"deepseek_llm", P::kDeepseekLlm}, {"default", P::kDefault}, {"deepseek_coder", P::kDeepseekCoder},
      {"deepseek_v3", P::kDeepseekV3}, {"spark2_5", P::kSpark2_5}, {"youtu", P::kYoutu},
      {"gpt4o", P::kGpt4o},       {"tekken", P::kTekken},         {"qwen35", P::kQwen35},
      {"kimi_k2", P::kKimiK2},    {"seed_coder", P::kSeedCoder},  {"bailingmoe", P::kBailingMoe},
      {"ufakzeka", P::kUfakzeka}, {"exaone_moe", P::kExaoneMoe},  {"minicpm5", P::kMinicpm5},
      {"laguna", P::kLaguna},     {"jais2", P::kJais2},           {"bloom", P::kBloom},
      {"viking", P::kViking},     {"chameleon", P::kChameleon},   {"tiny_aya", P::kTinyAya}};
  for (const auto& [key, kind] : kinds) {
    int bad = 0;
    for (const auto& c : cases) {
      const std::string text = c.at("text");
      const auto want = c.at(key).get<std::vector<std::string>>();
      const auto got = pre_tokenize(text, kind);
      if (got != want && ++bad <= 5) {
        std::string g, w;
        for (const auto& p : got) g += "[" + p + "]";
        for (const auto& p : want) w += "[" + p + "]";
        ADD_FAILURE() << key << ": '" << text << "'\n  ours:  " << g << "\n  regex: " << w;
      }
    }
    EXPECT_EQ(bad, 0) << key << ": " << bad << " of " << cases.size() << " texts split differently";
  }
}

// gpt-oss's tokenizer conventions against llama.cpp: a gpt-oss-style
// vocabulary (gen-model --harmony-vocab: GPT-2's byte-level BPE with the
// gpt-4o = o200k pre-tokenizer and harmony's special tokens; the weights do
// not matter here) tokenizes llama.cpp's test strings and o200k-specific ones
// (case-insensitive contractions, 1-3 digit groups, CJK, newlines, harmony's
// specials) to the ids llama-tokenize gave (tests/data/o200k-gpt-oss).
TEST(Tokenizer, GptOssO200kVocabularyTokenizesAsLlamaCpp) {
  TKV_NEED_SHARED("data/tokenizer/ggml-vocab-gpt-2.gguf");
  std::ifstream in(std::string(TKV_SOURCE_DIR) + "/tests/data/o200k-gpt-oss/llama-tokenize.json", std::ios::binary);
  ASSERT_TRUE(in) << "tests/data/o200k-gpt-oss/llama-tokenize.json";
  const auto doc = nlohmann::json::parse(in);
  auto v = gguf::File::open(shared_path("data/tokenizer/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(v.ok()) << v.error();
  GenModelOptions o;
  o.arch = "gpt-oss";
  o.harmony_vocab = true;
  o.layers = 1;
  o.type = "F16";
  const std::string path = testing::TempDir() + std::to_string(getpid()) + "_tkv_gptoss_vocab.gguf";
  ASSERT_TRUE(generate_model(o, v->get(), path).ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ((*f)->get_string_or("tokenizer.ggml.pre", ""), "gpt-4o");
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_TRUE(tok.ok()) << tok.error();
  std::remove(path.c_str());
  int bad = 0, n = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok->encode(text, false, true);
    ++n;
    if (got != want && ++bad <= 5) {
      std::string g, w;
      for (int32_t i : got) g += " " + std::to_string(i);
      for (int32_t i : want) w += " " + std::to_string(i);
      ADD_FAILURE() << "'" << text << "'\n  turbokv:  " << g << "\n  llama.cpp:" << w;
    }
  }
  EXPECT_GE(n, 60);
  EXPECT_EQ(bad, 0) << bad << " of " << n << " strings tokenized differently";
}

// Every tokenizer.ggml.pre name maps to a kind, the regex kinds' patterns
// compile (pre_tokenize aborts otherwise) and an unknown name's error lists
// the supported ones.
TEST(Tokenizer, EveryPreTokenizerNameIsKnownAndAnUnknownOneListsThem) {
  const std::string names = pre_tokenizer_names();
  for (const char* n : {"qwen35", "deepseek-llm", "deepseek-coder", "deepseek-v3", "mpt", "gpt-4o", "tekken", "smollm",
                        "olmo", "command-r", "llama4", "stablelm2", "phi-2", "dbrx", "exaone", "kimi-k2"}) {
    PreTokenizer k;
    EXPECT_TRUE(pre_tokenizer_from_name(n, k)) << n;
    EXPECT_NE(names.find(n), std::string::npos) << n;
    EXPECT_FALSE(pre_tokenize("I'm 12345 日本語 ok!", k).empty()) << n;
  }
  bool im = false;
  PreTokenizer k;
  ASSERT_TRUE(pre_tokenizer_from_name("tekken", k, &im));
  EXPECT_TRUE(im);
  ASSERT_TRUE(pre_tokenizer_from_name("dbrx", k, &im));
  EXPECT_FALSE(im);
  EXPECT_FALSE(pre_tokenizer_from_name("no-such-pre", k));
  gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "no-such-pre");
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.add_string_array("tokenizer.ggml.merges", {"a b"});
  const TempPath path("tkv_pre_vocab.gguf");
  ASSERT_TRUE(w.write(path).ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok());
  auto tok = tokenizer_from_gguf(**f);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().find("no-such-pre"), std::string::npos) << tok.error();
  EXPECT_NE(tok.error().find("kimi-k2"), std::string::npos) << tok.error();
}

// The regex matcher's own pieces, on cases where an engine could slip:
// alternation order (leftmost, not longest), backtracking of greedy runs,
// lookahead at the piece's end, lazy and possessive runs, case folding,
// \b and bad patterns.
TEST(Tokenizer, CptRegexMatchesLikeTheRegexModule) {
  auto m = [](const char* pattern, const std::string& text, size_t at = 0) -> std::string {
    auto r = CptRegex::compile(pattern);
    EXPECT_TRUE(r.ok()) << pattern;
    if (!r.ok()) return "<error>";
    const auto c = utf8_to_cpts(text);
    const size_t e = r->match_at(c.data(), 0, c.size(), at);
    if (e == CptRegex::kNoMatch) return "<none>";
    std::string s;
    for (size_t i = at; i < e; ++i) s += cpt_to_utf8(c[i]);
    return s;
  };
  EXPECT_EQ(m("a|ab", "ab"), "a");              // first alternative, not the longest
  EXPECT_EQ(m("\\s+(?!\\S)", "   x"), "  ");     // gives one space back to the lookahead
  EXPECT_EQ(m("\\s+(?!\\S)", "   "), "   ");     // end of the piece: nothing follows
  EXPECT_EQ(m("a+?b", "aaab"), "aaab");
  EXPECT_EQ(m("a*+a", "aaa"), "<none>");          // possessive gives nothing back
  EXPECT_EQ(m("(?i:'s|'t)", "'S"), "'S");
  EXPECT_EQ(m("(?i:'s)", "\u017f"), "<none>");
  EXPECT_EQ(m("(?i:'s)", "'\u017f"), "'\u017f");  // long s folds to s, as in `regex`
  EXPECT_EQ(m("\\p{N}{1,3}", "12345"), "123");
  EXPECT_EQ(m("\\d{1,3}(?=(?:\\d{3})*\\b)", "1234567"), "1");
  EXPECT_EQ(m("[^(\\s|.,)]+", "ab(c d"), "ab");
  EXPECT_EQ(m("\\p{Han}+", "\u6f22\u5b57abc"), "\u6f22\u5b57");
  EXPECT_EQ(m("(?:(?!\\p{Han})\\p{L})+", "ab\u6f22"), "ab");
  EXPECT_EQ(m("x$", "x"), "x");
  EXPECT_EQ(m("x$", "xy"), "<none>");
  for (const char* bad : {"(ab", "[ab", "a{2,1}", "\\p{Nope}", "*a", "\\q", "(?<n>a)"})
    EXPECT_FALSE(CptRegex::compile(bad).ok()) << bad;
}

// Long texts made to make a backtracking matcher work (one 60,000-letter
// word, 30,000 short words, digit and whitespace runs, mixed scripts: a
// stack frame per repetition overflowed on such lengths)
// through every kind: no crash (the repeats are iterative, not a stack frame
// per repetition), and the pieces put the text back together.
TEST(Tokenizer, EveryPreTokenizerKeepsLongAdversarialTextsWhole) {
  std::string letters(60000, 'a'), words, digits(30000, '7'), spaces(30000, ' '), mixed;
  for (int i = 0; i < 30000; ++i) words += "a ";
  for (int i = 0; i < 6000; ++i) mixed += "Ab\u6f22'S 12\t\u0301";
  for (int k = 0; k <= static_cast<int>(PreTokenizer::kDefault); ++k)
    for (const std::string* t : {&letters, &words, &digits, &spaces, &mixed}) {
      std::string joined;
      for (const auto& p : pre_tokenize(*t, static_cast<PreTokenizer>(k))) joined += p;
      EXPECT_EQ(joined.size(), t->size()) << "kind " << k;
      EXPECT_TRUE(joined == *t) << "kind " << k;
    }
}

TEST(Tokenizer, Llama3AndQwen2PreTokenizerSplits) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize("Hello world's 12345 !!\n\n  x", PreTokenizer::kLlama3),
            (V{"Hello", " world", "'s", " ", "123", "45", " !!\n\n", " ", " x"}));
  EXPECT_EQ(pre_tokenize("I'LL pay 2024", PreTokenizer::kQwen2), (V{"I", "'LL", " pay", " ", "2", "0", "2", "4"}));
  EXPECT_EQ(pre_tokenize("a  b", PreTokenizer::kGpt2), (V{"a", " ", " b"}));
}

}  // namespace
}  // namespace tkv
