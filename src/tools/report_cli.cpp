// `turbokv report --in FILE... --out report.html`: one self-contained page
// (inline SVG, no network) from the JSON lines that perplexity, bench and niah
// append with --json-out: PPL and KLD against bits per value, decode speed
// against context depth per format, and the needle-in-a-haystack grids.
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

#include "eval/niah.h"
#include "tools/subcommands.h"
#include "util/xml_text.h"

namespace tkv {
namespace {

struct Pt {
  double x, y;
  std::string label;
};

// A scatter/line chart with linear x and (optionally log) y axes.
std::string chart(const std::string& title, const std::string& xl, const std::string& yl,
                  const std::map<std::string, std::vector<Pt>>& series, bool logy, bool lines) {
  const int W = 640, H = 380, L = 70, R = 150, T = 40, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& [name, pts] : series)
    for (const auto& p : pts) {
      if (logy && p.y <= 0) continue;
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      const double y = logy ? std::log10(p.y) : p.y;
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"" << L << "\" y=\"22\" font-size=\"15\">" << xml_escape(title)
    << "</text>\n";
  if (x0 > x1) {
    s << "<text x=\"" << L << "\" y=\"" << H / 2 << "\">no data</text></svg>\n";
    return s.str();
  }
  if (x1 == x0) { x0 -= 1; x1 += 1; }
  if (y1 == y0) { y0 -= 1; y1 += 1; }
  const double pw = W - L - R, ph = H - T - B;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return T + ph - ((logy ? std::log10(y) : y) - y0) / (y1 - y0) * ph; };
  s << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    const double xv = x0 + (x1 - x0) * k / 4, yv = y0 + (y1 - y0) * k / 4;
    char bx[32], by[32];
    std::snprintf(bx, sizeof(bx), "%.3g", xv);
    std::snprintf(by, sizeof(by), "%.3g", logy ? std::pow(10.0, yv) : yv);
    s << "<text x=\"" << X(xv) - 10 << "\" y=\"" << T + ph + 18 << "\">" << bx << "</text>\n";
    s << "<text x=\"8\" y=\"" << T + ph - (yv - y0) / (y1 - y0) * ph + 4 << "\">" << by << "</text>\n";
  }
  s << "<text x=\"" << L + pw / 2 - 40 << "\" y=\"" << H - 10 << "\">" << xml_escape(xl) << "</text>\n";
  s << "<text x=\"8\" y=\"" << T - 10 << "\">" << xml_escape(yl) << "</text>\n";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  int ci = 0;
  for (const auto& [name, pts0] : series) {
    std::vector<Pt> pts = pts0;
    std::sort(pts.begin(), pts.end(), [](const Pt& a, const Pt& b) { return a.x < b.x; });
    const char* col = colors[ci % 10];
    if (lines && pts.size() > 1) {
      s << "<polyline fill=\"none\" stroke=\"" << col << "\" points=\"";
      for (const auto& p : pts)
        if (!logy || p.y > 0) s << X(p.x) << "," << Y(p.y) << " ";
      s << "\"/>\n";
    }
    for (const auto& p : pts) {
      if (logy && p.y <= 0) continue;
      s << "<circle cx=\"" << X(p.x) << "\" cy=\"" << Y(p.y) << "\" r=\"4\" fill=\"" << col << "\"><title>"
        << xml_escape(p.label) << "</title></circle>\n";
      if (!lines) s << "<text x=\"" << X(p.x) + 6 << "\" y=\"" << Y(p.y) - 6 << "\" font-size=\"10\">" << xml_escape(p.label) << "</text>\n";
    }
    s << "<text x=\"" << L + pw + 10 << "\" y=\"" << T + 14 + 16 * ci << "\" fill=\"" << col << "\">" << xml_escape(name)
      << "</text>\n";
    ++ci;
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace

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
    std::map<std::string, std::vector<Pt>> ppl, kld, speed;
    std::vector<std::string> niah;
    for (const auto& r : rows) {
      const std::string tool = r.value("tool", "");
      const std::string tk = r.value("type_k", "?"), tv = r.value("type_v", "?");
      const bool per_layer = tk.rfind("policy ", 0) == 0 || tk.rfind("preset ", 0) == 0;
      const std::string fmt = tk == tv && per_layer ? tk : tk + "/" + tv;  // a policy or preset names both
      if (tool == "perplexity" && r.contains("bits_per_value")) {
        const std::string series = r.value("mean_center", true) ? "mean-centred" : "plain";
        ppl[series].push_back({r["bits_per_value"].get<double>(), r["ppl"].get<double>(), fmt});
        if (r.contains("kld")) kld[series].push_back({r["bits_per_value"].get<double>(), r["kld"]["mean"].get<double>(), fmt});
      } else if (tool == "bench" && r.value("n_gen", 0) > 0) {
        speed[fmt].push_back({r.value("n_depth", 0) * 1.0, r["avg_ts"].get<double>(), r.value("test", "")});
      } else if (tool == "niah" && r.contains("cells")) {
        std::vector<NiahCell> cells;
        for (const auto& c : r["cells"]) {
          const std::string sc = c.value("score", "");
          cells.push_back({c["context"].get<int>(), c["depth"].get<int>(), c.value("trial", 0), c.value("number", ""),
                           c.value("answer", ""), sc == "found" ? NiahScore::kFound : NiahScore::kNotFound});
        }
        niah.push_back(niah_svg(cells, "needle in a haystack, " + fmt));
      }
    }
    std::ofstream html(*out);
    if (!html) {
      std::cerr << "turbokv report: error: " << *out << ": cannot write\n";
      throw CLI::RuntimeError(1);
    }
    html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>turbokv report</title>"
            "<style>body{font-family:sans-serif;max-width:1400px;margin:20px}svg{margin:8px;border:1px solid #eee}</style>"
            "</head><body>\n<h1>turbokv report</h1>\n<p>"
         << rows.size() << " results from " << in->size() << " file(s).</p>\n<h2>Quality per bit</h2>\n"
         << chart("Perplexity against KV bits per value", "bits per value (K and V average)", "PPL", ppl, false, false)
         << chart("Mean KL divergence against bits per value (log scale)", "bits per value", "mean KLD", kld, true, false)
         << "<h2>Decode speed</h2>\n"
         << chart("Generation tokens/s against context depth", "depth (tokens in the cache)", "tokens/s", speed, false, true)
         << "<h2>Needle in a haystack</h2>\n";
    for (const auto& s : niah) html << s;
    if (niah.empty()) html << "<p>no niah results</p>\n";
    html << "</body></html>\n";
    std::cerr << "wrote " << *out << "\n";
  });
}

}  // namespace tkv
