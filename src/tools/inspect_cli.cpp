// `turbokv inspect MODEL.gguf`: the metadata and tensors of a GGUF file (of
// every part of a split model, whose parts it lists).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tools/subcommands.h"

namespace tkv {
namespace {

std::string show(const gguf::Value& v) {
  using gguf::Type;
  switch (v.type) {
    case Type::kString: return "\"" + std::string(v.s.substr(0, 200)) + (v.s.size() > 200 ? "...\"" : "\"");
    case Type::kF32: case Type::kF64: return std::to_string(v.f);
    case Type::kBool: return v.u ? "true" : "false";
    case Type::kI8: case Type::kI16: case Type::kI32: case Type::kI64: return std::to_string(v.i);
    case Type::kArray: {
      std::string s = std::string("[") + gguf::type_name(v.elem) + " x " + std::to_string(v.count) + "]";
      const uint64_t shown = std::min<uint64_t>(v.count, 8);
      s += " ";
      for (uint64_t k = 0; k < shown; ++k) {
        if (k) s += ", ";
        if (v.elem == Type::kString) s += "\"" + std::string(v.strings[k]) + "\"";
        else if (v.elem == Type::kArray) s += "[...]";
        else if (v.elem == Type::kF32 || v.elem == Type::kF64) s += std::to_string(v.num(k));
        else s += std::to_string(v.inum(k));
      }
      if (v.count > shown) s += ", ...";
      return s;
    }
    default: return std::to_string(v.u);
  }
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto no_tensors = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("inspect", "Print the metadata and tensors of a GGUF file");
  cmd->add_option("model", *path, "GGUF file")->required();
  cmd->add_flag("--no-tensors", *no_tensors, "metadata only");
  cmd->callback([path, no_tensors]() {
    auto f = gguf::File::open(*path);
    if (!f) {
      // A later part of a split model on its own: shown as the part it is.
      auto p = gguf::File::open_part(*path);
      if (!p || !(*p)->find("split.no") || (*p)->get_uint_or("split.no", 0) == 0) {
        std::cerr << "turbokv inspect: error: " << f.error() << "\n";
        throw CLI::RuntimeError(1);
      }
      std::printf("%s: part %lu of %lu of a split model (open the first part for the model)\n", path->c_str(),
                  static_cast<unsigned long>((*p)->get_uint_or("split.no", 0) + 1),
                  static_cast<unsigned long>((*p)->get_uint_or("split.count", 0)));
      f = std::move(p);
    }
    const auto& file = **f;
    std::printf("%s: GGUF v%u, %zu metadata entries, %zu tensors, alignment %lu, data at byte %lu\n",
                path->c_str(), file.version(), file.metadata().size(), file.tensors().size(),
                static_cast<unsigned long>(file.alignment()), static_cast<unsigned long>(file.data_offset()));
    if (file.parts().size() > 1) {  // a split model: every part, each mapped
      std::printf("split model: %zu parts\n", file.parts().size());
      for (size_t i = 0; i < file.parts().size(); ++i)
        std::printf("  part %zu: %s, %lu tensors, %lu bytes\n", i + 1, file.parts()[i].path.c_str(),
                    static_cast<unsigned long>(file.parts()[i].n_tensors),
                    static_cast<unsigned long>(file.parts()[i].size));
    }
    for (const auto& [k, v] : file.metadata())
      std::printf("  %-45s %-7s %s\n", k.c_str(), gguf::type_name(v.type), show(v).c_str());
    // The layer stack as the runtime reads it (a vocabulary-only file or a
    // later part of a split is no model).
    if (file.find("general.architecture")) {
      auto m = Model::from_file(*f);
      if (m) {
        std::printf("model: %s\n", (*m)->config().describe().c_str());
        std::printf("KV cache: %d of %d layers\n", (*m)->config().n_kv_layer(), (*m)->config().n_layer);
      } else {
        std::printf("model: not loadable: %s\n", m.error().c_str());
      }
    }
    if (*no_tensors) return;
    uint64_t total = 0;
    for (const auto& t : file.tensors()) {
      std::string dims;
      for (size_t d = 0; d < t.dims.size(); ++d) dims += (d ? " x " : "") + std::to_string(t.dims[d]);
      std::printf("  %-40s %-6s %-24s %12lu bytes\n", t.name.c_str(), t.info().name, dims.c_str(),
                  static_cast<unsigned long>(t.n_bytes));
      total += t.n_bytes;
    }
    std::printf("  total tensor bytes: %lu\n", static_cast<unsigned long>(total));
  });
}

}  // namespace tkv
