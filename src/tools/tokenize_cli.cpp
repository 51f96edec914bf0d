// `turbokv tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--no-bos]`: token ids on
// one line, space separated (like llama-tokenize); vocabulary-only GGUF works.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "gguf/gguf.h"
#include "model/tokenizer_gguf.h"
#include "text/tokenizer.h"
#include "tools/subcommands.h"
#include "util/text_file.h"

namespace tkv {

void register_tokenize(CLI::App& app) {
  struct Opt {
    std::string model, prompt, file;
    bool no_bos = false, parse_special = false;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text");
  cmd->add_option("-m,--model", o->model, "GGUF model or vocabulary file")->required();
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "text");
  auto* f = cmd->add_option("-f,--file", o->file, "text file");
  p->excludes(f);
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS");
  cmd->add_flag("--parse-special", o->parse_special, "turn control-token text into control tokens");
  cmd->callback([o, p, f]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv tokenize: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    if (p->count() == 0 && f->count() == 0) fail("give -p TEXT or -f FILE");
    std::string text = o->prompt;
    if (f->count()) {
      auto t = read_text_file(o->file);
      if (!t) fail(t.error());
      text = *t;
    }
    auto g = gguf::File::open(o->model);
    if (!g) fail(g.error());
    auto tok = tokenizer_from_gguf(**g);
    if (!tok) fail(tok.error());
    const auto ids = tok->encode(text, !o->no_bos, o->parse_special);
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  });
}

}  // namespace tkv
