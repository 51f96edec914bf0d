#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "eval/niah.h"
#include "util/xml_text.h"

namespace tkv {

std::vector<double> nice_ticks(double lo, double hi, int target, int* decimals) {
  if (!(hi > lo)) {  // one value: a small range around it
    const double pad = lo != 0 ? std::fabs(lo) * 0.05 : 1.0;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target - 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double mant = 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw * (1 - 1e-9)) {
      mant = m;
      break;
    }
  const double step = mant * mag;
  const double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6 && i < 100; ++i) t.push_back(first + i * step);
  if (decimals) *decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return t;
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks, int decimals, bool log_axis) {
  std::vector<std::string> out(ticks.size());
  char b[64];
  if (!log_axis) {
    for (size_t i = 0; i < ticks.size(); ++i) {
      std::snprintf(b, sizeof b, "%.*f", decimals, std::fabs(ticks[i]) < 1e-12 ? 0.0 : ticks[i]);
      out[i] = b;
    }
    return out;
  }
  for (int prec = 1; prec <= 12; ++prec) {
    for (size_t i = 0; i < ticks.size(); ++i) {
      std::snprintf(b, sizeof b, "%.*g", prec, ticks[i]);
      out[i] = b;
    }
    if (std::set<std::string>(out.begin(), out.end()).size() == out.size()) break;
  }
  return out;
}

namespace {

std::string num(double v, int sig = 5) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*g", sig, v);
  return b;
}

// An SVG coordinate.
std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Log-axis ticks over [lo, hi] (both > 0): every decade, with 2 and 5 when
// the range spans fewer than two.
std::vector<double> log_ticks(double lo, double hi) {
  const int k0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
  const int k1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
  std::vector<double> t;
  const bool fine = k1 - k0 < 2;
  for (int k = k0; k <= std::max(k1, k0 + 1); ++k) {
    const double p = std::pow(10.0, k);
    t.push_back(p);
    if (fine && k < std::max(k1, k0 + 1)) {
      t.push_back(2 * p);
      t.push_back(5 * p);
    }
  }
  // Keep one tick below lo and one above hi at most.
  std::vector<double> out;
  for (size_t i = 0; i < t.size(); ++i) {
    const bool below_next = i + 1 < t.size() && t[i + 1] <= lo * (1 + 1e-9);
    const bool above_prev = i > 0 && t[i - 1] >= hi * (1 - 1e-9);
    if (!below_next && !above_prev) out.push_back(t[i]);
  }
  return out;
}

}  // namespace

std::string chart_html(const Chart& c) {
  const double W = 760, H = 430, L = 86, R = 200, T = 44, B = 64;
  const double pw = W - L - R, ph = H - T - B;
  std::ostringstream s;
  // Data ranges (error bars included); on a log axis, positive values only.
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  // A log axis spans at most kLogDecades decades below the largest value:
  // one far smaller point (f16's KLD of 3e-8 beside tq formats' 1e-3..1e-2)
  // would otherwise squeeze every other point into the top of the chart; it
  // is listed under the chart instead, as zeros are.
  constexpr int kLogDecades = 5;
  double floor_y = 0;
  if (c.log_y) {
    double top = 0;
    for (const auto& se : c.series)
      for (const auto& p : se.points) top = std::max(top, std::max(p.y, p.hi));
    if (top > 0) floor_y = std::pow(10.0, std::ceil(std::log10(top) - 1e-9) - kLogDecades);
  }
  auto drawn = [&](const ChartPoint& p) { return !c.log_y || (p.y > 0 && p.y >= floor_y); };
  std::vector<std::string> not_drawn;
  for (const auto& se : c.series)
    for (const auto& p : se.points) {
      if (!drawn(p)) {
        not_drawn.push_back(se.name + (p.label.empty() ? "" : " (" + p.label + ")") + ": " + num(p.y));
        continue;
      }
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      const bool bar = p.hi > p.lo;
      for (double v : {p.y, bar ? p.lo : p.y, bar ? p.hi : p.y})
        if (!c.log_y || v >= floor_y) {
          y0 = std::min(y0, v);
          y1 = std::max(y1, v);
        }
    }
  s << "<figure class=\"chart\">\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << " " << H
    << "\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<text class=\"title\" x=\"" << L << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(c.title)
    << "</text>\n";
  if (x0 > x1) {
    s << "<text x=\"" << L << "\" y=\"" << H / 2 << "\">no results for this chart</text>\n</svg>\n</figure>\n";
    return s.str();
  }
  int xd = 0, yd = 0;
  const auto xt = nice_ticks(x0, x1, 6, &xd);
  const auto yt = c.log_y ? log_ticks(y0, y1) : nice_ticks(y0, y1, 6, &yd);
  const auto xl = tick_labels(xt, xd, false), yl = tick_labels(yt, yd, c.log_y);
  const double ax0 = xt.front(), ax1 = xt.back();
  const double ay0 = c.log_y ? std::log10(yt.front()) : yt.front(), ay1 = c.log_y ? std::log10(yt.back()) : yt.back();
  auto X = [&](double x) { return L + (x - ax0) / (ax1 - ax0) * pw; };
  auto Y = [&](double y) { return T + ph - ((c.log_y ? std::log10(y) : y) - ay0) / (ay1 - ay0) * ph; };
  // Grid, frame, ticks.
  for (size_t i = 0; i < xt.size(); ++i)
    s << "<line x1=\"" << px(X(xt[i])) << "\" y1=\"" << T << "\" x2=\"" << px(X(xt[i])) << "\" y2=\"" << T + ph
      << "\" stroke=\"#eee\"/>\n<text class=\"tick-x\" x=\"" << px(X(xt[i])) << "\" y=\"" << T + ph + 18
      << "\" text-anchor=\"middle\">" << xl[i] << "</text>\n";
  for (size_t i = 0; i < yt.size(); ++i)
    s << "<line x1=\"" << L << "\" y1=\"" << px(Y(yt[i])) << "\" x2=\"" << L + pw << "\" y2=\"" << px(Y(yt[i]))
      << "\" stroke=\"#eee\"/>\n<text class=\"tick-y\" x=\"" << L - 8 << "\" y=\"" << px(Y(yt[i]) + 4)
      << "\" text-anchor=\"end\">" << yl[i] << "</text>\n";
  s << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  s << "<text class=\"axis-label\" x=\"" << px(L + pw / 2) << "\" y=\"" << H - 14 << "\" text-anchor=\"middle\">"
    << xml_escape(c.x_label) << "</text>\n";
  s << "<text class=\"axis-label\" transform=\"translate(18," << px(T + ph / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
    << xml_escape(c.y_label) << "</text>\n";
  // Series: error bars, lines, markers.
  bool any_hollow = false;
  for (const auto& se : c.series) {
    std::vector<ChartPoint> pts;
    for (const auto& p : se.points)
      if (drawn(p)) pts.push_back(p);
    std::sort(pts.begin(), pts.end(), [](const ChartPoint& a, const ChartPoint& b) { return a.x < b.x; });
    for (const auto& p : pts) {
      if (!(p.hi > p.lo)) continue;
      const double lo = c.log_y ? std::max(p.lo, std::pow(10.0, ay0)) : p.lo;
      s << "<line class=\"error-bar\" x1=\"" << px(X(p.x)) << "\" y1=\"" << px(Y(lo)) << "\" x2=\"" << px(X(p.x))
        << "\" y2=\"" << px(Y(p.hi)) << "\" stroke=\"" << se.color << "\" stroke-width=\"1.5\"/>\n";
      for (double v : {lo, p.hi})
        s << "<line x1=\"" << px(X(p.x) - 4) << "\" y1=\"" << px(Y(v)) << "\" x2=\"" << px(X(p.x) + 4) << "\" y2=\""
          << px(Y(v)) << "\" stroke=\"" << se.color << "\"/>\n";
    }
    if (se.line && pts.size() > 1) {
      s << "<polyline fill=\"none\" stroke=\"" << se.color << "\" stroke-width=\"1.5\" points=\"";
      for (const auto& p : pts) s << px(X(p.x)) << "," << px(Y(p.y)) << " ";
      s << "\"/>\n";
    }
    for (const auto& p : pts) {
      any_hollow |= p.hollow;
      s << "<circle class=\"point\" data-series=\"" << xml_escape(se.name) << "\" cx=\"" << px(X(p.x)) << "\" cy=\""
        << px(Y(p.y)) << "\" r=\"4.5\" fill=\"" << (p.hollow ? "white" : se.color) << "\" stroke=\"" << se.color
        << "\" stroke-width=\"2\"><title>" << xml_escape(se.name + (p.label.empty() ? "" : ", " + p.label)) << ": "
        << num(p.y) << "</title></circle>\n";
    }
  }
  // Legend: one entry per series.
  double ly = T + 8;
  for (const auto& se : c.series) {
    s << "<g class=\"legend-entry\"><rect x=\"" << L + pw + 14 << "\" y=\"" << px(ly) << "\" width=\"12\" height=\"12\" fill=\""
      << se.color << "\"/><text x=\"" << L + pw + 32 << "\" y=\"" << px(ly + 10) << "\">" << xml_escape(se.name)
      << "</text></g>\n";
    ly += 18;
  }
  if (any_hollow && !c.hollow_means.empty())
    s << "<g class=\"legend-note\"><circle cx=\"" << L + pw + 20 << "\" cy=\"" << px(ly + 8)
      << "\" r=\"4.5\" fill=\"white\" stroke=\"#444\" stroke-width=\"2\"/><text x=\"" << L + pw + 32 << "\" y=\""
      << px(ly + 12) << "\">" << xml_escape(c.hollow_means) << "</text></g>\n";
  s << "</svg>\n";
  if (!not_drawn.empty()) {
    s << "<figcaption class=\"not-drawn\">Not drawn (zero, or more than " << kLogDecades
      << " decades below the largest value on the log axis): ";
    for (size_t i = 0; i < not_drawn.size(); ++i) s << (i ? "; " : "") << xml_escape(not_drawn[i]);
    s << ".</figcaption>\n";
  }
  // The numbers drawn.
  s << "<table class=\"numbers\"><tr><th>cache type</th><th>" << xml_escape(c.x_label) << "</th><th>"
    << xml_escape(c.y_label) << "</th><th>error bar</th><th>detail</th></tr>\n";
  for (const auto& se : c.series)
    for (const auto& p : se.points)
      s << "<tr><td>" << xml_escape(se.name) << "</td><td>" << num(p.x) << "</td><td>" << num(p.y) << "</td><td>"
        << (p.hi > p.lo ? num(p.lo) + " .. " + num(p.hi) : "") << "</td><td>"
        << xml_escape(p.label + (p.hollow && !c.hollow_means.empty() ? (p.label.empty() ? "" : ", ") + c.hollow_means : ""))
        << "</td></tr>\n";
  s << "</table>\n</figure>\n";
  return s.str();
}

namespace {

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                          "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

// The cache type a result names: "tq4/tq4" style, or a policy / preset.
std::string cache_type(const nlohmann::json& r) {
  const std::string tk = r.value("type_k", "?"), tv = r.value("type_v", "?");
  const bool per_layer = tk.rfind("policy ", 0) == 0 || tk.rfind("preset ", 0) == 0;
  return tk == tv && per_layer ? tk : tk + "/" + tv;
}

// Series of a chart in the page's cache-type order, coloured by type.
class SeriesSet {
 public:
  SeriesSet(const std::map<std::string, std::string>& colors, const std::vector<std::string>& order, bool line)
      : colors_(colors), order_(order), line_(line) {}
  void add(const std::string& type, const std::string& name, const ChartPoint& p) {
    auto& s = by_name_[name];
    s.name = name;
    s.color = colors_.at(type);
    s.line = line_;
    s.points.push_back(p);
    type_of_[name] = type;
  }
  std::vector<ChartSeries> series() const {
    std::vector<ChartSeries> out;
    for (const auto& t : order_)
      for (const auto& [name, s] : by_name_)
        if (type_of_.at(name) == t) out.push_back(s);
    return out;
  }

 private:
  const std::map<std::string, std::string>& colors_;
  const std::vector<std::string>& order_;
  bool line_;
  std::map<std::string, ChartSeries> by_name_;
  std::map<std::string, std::string> type_of_;
};

}  // namespace

std::string report_html(const std::vector<nlohmann::json>& rows, size_t files) {
  // One colour per cache type, in order of first appearance, for every chart.
  std::vector<std::string> order;
  std::map<std::string, std::string> colors;
  std::set<int> threads;
  std::vector<char> usable(rows.size(), 1);  // rows whose fields have the types the tools write
  int skipped = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    try {
      const std::string tool = r.is_object() ? r.value("tool", "") : "";
      if (tool != "perplexity" && tool != "bench" && tool != "niah") continue;
      const std::string t = cache_type(r);
      if (tool == "bench") threads.insert(r.value("threads", 0));
      if (!colors.count(t)) {
        colors[t] = kPalette[order.size() % 10];
        order.push_back(t);
      }
    } catch (const nlohmann::json::exception&) {
      usable[i] = 0;
      ++skipped;
    }
  }
  SeriesSet ppl(colors, order, false), kld(colors, order, false), tg(colors, order, true), pp(colors, order, true);
  std::vector<std::string> niah;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    if (!usable[i] || !r.is_object()) continue;
    try {
      const std::string tool = r.value("tool", "");
      const std::string type = cache_type(r);
      if (tool == "perplexity" && r.contains("bits_per_value") && r.contains("ppl")) {
        const double bits = r["bits_per_value"].get<double>();
        const bool centred = r.value("mean_center", true);
        const std::string label = "c " + std::to_string(r.value("ctx", 0)) + ", " + std::to_string(r.value("chunks", 0)) + " chunks";
        ChartPoint p{bits, r["ppl"].get<double>(), 0, 0, !centred, label};
        const double e = r.value("ppl_err", 0.0);
        if (e > 0) p.lo = p.y - e, p.hi = p.y + e;
        ppl.add(type, type, p);
        if (r.contains("kld") && r["kld"].contains("mean")) {
          ChartPoint k{bits, r["kld"]["mean"].get<double>(), 0, 0, !centred, label};
          const double ke = r["kld"].value("mean_err", 0.0);
          if (ke > 0) k.lo = k.y - ke, k.hi = k.y + ke;
          kld.add(type, type, k);
        }
      } else if (tool == "bench" && r.contains("avg_ts")) {
        const bool gen = r.value("n_gen", 0) > 0;
        const int th = r.value("threads", 0);
        const std::string name = threads.size() > 1 ? type + " t=" + std::to_string(th) : type;
        ChartPoint p{r.value("n_depth", 0) * 1.0, r["avg_ts"].get<double>(), 0, 0, false, r.value("test", "")};
        if (r.contains("samples_ts") && r["samples_ts"].size() > 1) {
          std::vector<double> v = r["samples_ts"].get<std::vector<double>>();
          p.lo = *std::min_element(v.begin(), v.end());
          p.hi = *std::max_element(v.begin(), v.end());
          p.label += ", min-max of " + std::to_string(v.size()) + " runs";
        } else if (r.value("stddev_ts", 0.0) > 0) {
          p.lo = p.y - r["stddev_ts"].get<double>();
          p.hi = p.y + r["stddev_ts"].get<double>();
        }
        (gen ? tg : pp).add(type, name, p);
      } else if (tool == "niah" && r.contains("cells")) {
        std::vector<NiahCell> cells;
        for (const auto& c : r["cells"]) {
          const std::string sc = c.value("score", "");
          cells.push_back({c.value("context", 0), c.value("depth", 0), c.value("trial", 0), c.value("number", ""),
                           c.value("answer", ""), sc == "found" ? NiahScore::kFound : NiahScore::kNotFound});
        }
        niah.push_back(niah_svg(cells, "needle in a haystack, " + type));
      }
    } catch (const nlohmann::json::exception&) {  // a field of the wrong type: not drawn, counted
      ++skipped;
    }
  }
  const std::string hollow = "hollow: mean centring off";
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">"
       "<title>turbokv report</title><style>"
       "body{font-family:sans-serif;max-width:1600px;margin:20px;color:#222}"
       "figure.chart{display:inline-block;vertical-align:top;margin:8px;max-width:100%}"
       "figure.chart svg{max-width:100%;height:auto;border:1px solid #eee}"
       "table.numbers{border-collapse:collapse;font-size:12px;margin-top:6px}"
       "table.numbers td,table.numbers th{border:1px solid #ddd;padding:2px 6px;text-align:right}"
       "table.numbers td:first-child,table.numbers td:last-child{text-align:left}"
       "figcaption{font-size:12px;color:#555;max-width:740px}</style></head><body>\n<h1>turbokv report</h1>\n<p>"
    << rows.size() << " results from " << files << " file(s)"
    << (skipped ? ", " + std::to_string(skipped) + " of them left out (fields of the wrong type)" : "")
    << ".</p>\n<h2>Quality per bit</h2>\n"
    << chart_html({"Perplexity against KV bits per value", "KV bits per value (K and V average)",
                   "perplexity (lower is better)", false, hollow, ppl.series()})
    << chart_html({"Mean KL divergence from the base run", "KV bits per value (K and V average)",
                   "mean KLD (nats, log scale)", true, hollow, kld.series()})
    << "<h2>Speed</h2>\n"
    << chart_html({"Generation speed against context depth", "context depth (tokens already in the cache)",
                   "generation (tokens/s)", false, "", tg.series()})
    << chart_html({"Prompt processing speed against context depth", "context depth (tokens already in the cache)",
                   "prompt processing (tokens/s)", false, "", pp.series()})
    << "<h2>Needle in a haystack</h2>\n";
  for (const auto& s : niah) h << s;
  if (niah.empty()) h << "<p>no niah results</p>\n";
  h << "</body></html>\n";
  return h.str();
}

}  // namespace tkv
