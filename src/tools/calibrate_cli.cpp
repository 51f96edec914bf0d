// `turbokv calibrate -m MODEL -f TEXT|DIR [--tokens N] [-c 512] [--budget B |
// --bits B] [--kld-tokens N] [--protect S,W[,F]|auto] [--budget-ctx N] [-t T]
// [--seed S] -o POLICY`: a KV policy for
// this model (eval/calibrate.h), used with --kv-policy.
#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "eval/calibrate.h"
#include "tools/common_flags.h"
#include "tools/kv_flags.h"
#include "tools/subcommands.h"
#include "util/progress.h"
#include "util/text_file.h"

namespace tkv {

void register_calibrate(CLI::App& app) {
  struct Opt {
    std::string model, file, out, protect;
    int threads = 0;
    bool no_progress = false;
    CalibrateOptions c;
  };
  auto o = std::make_shared<Opt>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Fit per-head KV bases and per-layer bits; write a KV policy");
  add_model_flag(cmd, o->model);
  cmd->add_option("-f,--file", o->file, "calibration text: a file, or a directory of .txt files")->required();
  cmd->add_option("-o,--output", o->out, "policy file to write")->required();
  cmd->add_option("--tokens", o->c.tokens, "calibration tokens")->capture_default_str()->check(CLI::Range(8, 1 << 24));
  cmd->add_option("-c,--ctx-size", o->c.n_ctx, "chunk length")->capture_default_str()->check(CLI::Range(8, 1 << 20));
  auto* b = cmd->add_option("--budget", o->c.budget,
                            "average bits per value (scales included); per-layer K and V widths by measured KLD")
                ->check(finite_range(1.0, 8.0));
  cmd->add_option("--bits", o->c.bits, "bits per value of every layer when there is no budget")
      ->capture_default_str()->check(finite_range(1.0, 8.5))->excludes(b);
  cmd->add_option("--kld-tokens", o->c.kld_tokens, "tokens of each sensitivity run (with --budget)")
      ->capture_default_str()->check(CLI::Range(8, 1 << 20));
  add_threads_flag(cmd, o->threads);
  add_no_progress_flag(cmd, o->no_progress);
  cmd->add_option("--seed", o->c.seed, "seed of the isotropic alternatives")->capture_default_str();
  cmd->add_flag("--lattice", o->c.lattice,
                "with --budget: te8 (E8 lattice, 2 bits per coordinate) is a candidate beside the tqc widths")
      ->needs(b);
  cmd->add_flag("--trellis", o->c.trellis,
                "with --budget: ttcB (the trellis code on the calibrated coordinates) beside each tqcB of at most 3 bits")
      ->needs(b);
  cmd->add_option("--protect", o->protect,
                  "protected tokens SINKS,RECENT[,FORMAT] stored in the policy (as --kv-protect); with --budget "
                  "their rows count against it at --budget-ctx tokens and the widths are chosen with them; "
                  "auto: the best of none, 0,32,q8_0 and 0,64,q8_0 by measured KLD");
  cmd->add_option("--budget-ctx", o->c.budget_ctx,
                  "context length at which protected tokens' rows are counted against the budget (default: -c)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->callback([o]() {
    auto fail = [](const std::string& m) {
      std::cerr << "turbokv calibrate: error: " << m << "\n";
      throw CLI::RuntimeError(1);
    };
    if (o->protect == "auto") {
      o->c.protect_auto = true;
    } else if (!o->protect.empty() &&
               !parse_protect_spec(o->protect, o->c.protect_sinks, o->c.protect_recent, o->c.protect_type)) {
      fail("--protect '" + o->protect + "': expected auto or SINKS,RECENT[,FORMAT] (two counts, e.g. 0,32,q8_0)");
    }
    auto text = read_text_path(o->file);
    if (!text) fail(text.error());
    auto m = Model::load(o->model);
    if (!m) fail(m.error());
    CalibrateReport rep;
    o->c.threads = resolve_threads(o->threads);
    Progress progress("calibrate", 0, "steps", !o->no_progress);
    int steps = 0;
    auto pol = calibrate(**m, *text, o->c, &rep, [&](const std::string& s) {
      progress.update(++steps, s);
      return true;
    });
    progress.done();
    if (!pol) fail(pol.error().rfind("calibrate: ", 0) == 0 ? pol.error().substr(11) : pol.error());
    pol->source = "calibrated on " + o->file + ": " + pol->source;
    Status s = write_kv_policy(o->out, *pol);
    if (!s.ok()) fail(s.message());
    std::printf("layer  K/V  format    bits/value  basis       held-out rel MSE at that width (calibrated / isotropic)%s\n",
                rep.entries.empty() || rep.entries[0].kld.empty() ? "" : "  KLD at each width");
    for (const auto& e : rep.entries) {
      std::printf("%5d  %s  %-8s  %10.3f  %-10s  %.4e / %.4e", e.layer, e.is_v ? "V" : "K", e.format.c_str(), e.bits,
                  e.format == "te8" ? "rotation" : e.calibrated ? "calibrated" : "isotropic", e.mse_calibrated,
                  e.mse_isotropic);
      if (!e.kld.empty()) {
        std::printf("  ");
        for (size_t i = 0; i < e.kld.size(); ++i)
          std::printf(" %s%.3g:%.5f", rep.formats[i] == "te8" ? "te8@" : rep.formats[i].rfind("ttc", 0) == 0 ? "ttc@" : "",
                      rep.widths[i], e.kld[i]);
      }
      std::printf("\n");
    }
    for (size_t i = 0; i < rep.protect_trials.size(); ++i) {
      const ProtectChoice& t = rep.protect_trials[i];
      if (rep.protect_trials.size() == 1 && t.sinks + t.recent == 0) break;
      std::printf("protected %d,%d,%s: %.4f bits per value at %d tokens, ", t.sinks, t.recent, t.type.c_str(), t.bits,
                  o->c.budget_ctx > 0 ? o->c.budget_ctx : o->c.n_ctx);
      if (!t.fits) std::printf("leaves too little of the budget\n");
      else if (t.measured_kld >= 0) std::printf("predicted KLD %.6f, measured %.6f%s\n", t.predicted_kld, t.measured_kld,
                                                int(i) == rep.protect_chosen ? "  <- chosen" : "");
      else std::printf("predicted KLD %.6f\n", t.predicted_kld);
    }
    auto bpv = pol->bits_per_value();
    const double prot = rep.protect_trials.empty() ? 0.0 : rep.protect_trials[rep.protect_chosen].bits;
    std::printf("wrote %s: %d layers x %d KV heads, d = %d, %.4f bits per value on average%s%s\n", o->out.c_str(),
                pol->n_layer, pol->n_kv_heads, pol->head_dim, bpv ? *bpv + prot : 0.0,
                prot > 0 ? (" (protected rows included: " + std::to_string(prot) + ")").c_str() : "",
                rep.entries.empty() || rep.entries[0].kld.empty()
                    ? ""
                    : (", predicted KLD " + std::to_string(rep.total_kld)).c_str());
  });
}

}  // namespace tkv
