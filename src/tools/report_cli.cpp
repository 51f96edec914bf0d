// `turbokv report --in FILE... --out report.html`: one self-contained page
// (inline SVG, no network) from the JSON lines that perplexity, bench and niah
// append with --json-out (eval/report.h: the charts and their conventions).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "eval/report.h"
#include "tools/subcommands.h"

namespace tkv {

void register_report(CLI::App& app) {
  auto in = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("report.html");
  CLI::App* cmd = app.add_subcommand("report", "Self-contained HTML report from --json-out files");
  cmd->add_option("--in", *in, "JSON-lines files from perplexity, bench, niah")->required();
  cmd->add_option("--out", *out, "HTML output");
  cmd->callback([in, out]() {
    std::vector<nlohmann::json> rows;
    for (const auto& f : *in) {
      std::ifstream is(f);
      if (!is) {
        std::cerr << "turbokv report: error: " << f << ": cannot open\n";
        throw CLI::RuntimeError(1);
      }
      std::string line;
      int n = 0;
      while (std::getline(is, line)) {
        ++n;
        if (line.empty()) continue;
        try {
          rows.push_back(nlohmann::json::parse(line));
        } catch (const std::exception& e) {
          std::cerr << "turbokv report: error: " << f << " line " << n << ": not JSON (" << e.what() << ")\n";
          throw CLI::RuntimeError(1);
        }
      }
    }
    std::ofstream html(*out);
    if (!html) {
      std::cerr << "turbokv report: error: " << *out << ": cannot write\n";
      throw CLI::RuntimeError(1);
    }
    html << report_html(rows, in->size());
    std::cerr << "wrote " << *out << "\n";
  });
}

}  // namespace tkv
