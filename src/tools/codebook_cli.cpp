// `turbokv codebook`: the Lloyd-Max codebooks the tq formats use (DESIGN.md
// 1.2), with their exact distortion, so anyone can check them by hand.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "codec/codebook.h"
#include "tools/json_text.h"
#include "tools/subcommands.h"

namespace tkv {

void register_codebook(CLI::App& app) {
  struct Opt {
    int d = 128, min_bits = 1, max_bits = 4;
    bool gaussian = false, json = false, centroids = false;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("codebook", "Lloyd-Max codebooks for rotated coordinates and their distortion");
  cmd->add_option("--d", o->d, "head dim")->check(CLI::Range(3, 65536));
  cmd->add_option("--min-bits", o->min_bits, "first bit width")->check(CLI::Range(1, 8));
  cmd->add_option("--max-bits", o->max_bits, "last bit width")->check(CLI::Range(1, 8));
  cmd->add_flag("--gaussian", o->gaussian, "the Gaussian-limit density N(0, 1/d) instead of f_d");
  cmd->add_flag("--centroids", o->centroids, "also print the positive centroids");
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->callback([o]() {
    nlohmann::json out = nlohmann::json::array();
    if (!o->json)
      std::printf("%-5s %-6s %14s %14s %10s\n", "bits", "d", "MSE/vector", "4^-bits", "ratio");
    for (int b = o->min_bits; b <= o->max_bits; ++b) {
      const Codebook& cb = lloyd_max(o->d, b, o->gaussian ? Density::kGaussian : Density::kSphere);
      const double rd = std::pow(4.0, -b);
      nlohmann::json c = nlohmann::json::array();
      for (size_t j = cb.centroids.size() / 2; j < cb.centroids.size(); ++j) c.push_back(cb.centroids[j]);
      out.push_back({{"bits", b}, {"d", o->d}, {"density", o->gaussian ? "gaussian" : "sphere"},
                     {"mse_per_vector", cb.mse_vector()}, {"rd_bound", rd}, {"positive_centroids", c},
                     {"lloyd_iterations", cb.iterations}});
      if (!o->json) {
        std::printf("%-5d %-6d %14.6g %14.6g %10.4f\n", b, o->d, cb.mse_vector(), rd, cb.mse_vector() / rd);
        if (o->centroids) {
          std::printf("      positive centroids:");
          for (auto& v : c) std::printf(" %.6f", v.get<double>());
          std::printf("\n");
        }
      }
    }
    if (o->json) std::cout << json_text(out, 2) << "\n";
  });
}

}  // namespace tkv
