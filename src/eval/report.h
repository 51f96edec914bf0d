// `turbokv report`: one self-contained HTML page (inline SVG, no network)
// from the JSON lines that perplexity, bench and niah append with
// --json-out. The charts follow the usual conventions of benchmark plots:
//  - one colour and one legend entry per cache type, the same in every chart;
//  - tick labels at "nice" steps (1, 2, 5 x 10^k) with as many digits
//    as it takes for neighbours to differ; units on every axis;
//  - on a log axis the range comes from the positive values, at most five
//    decades below the largest; zeros (f16's KLD against itself) and values
//    below that are left out and listed under the chart;
//  - error bars: ± the standard error (perplexity, KLD) or the min-max of
//    the repeated runs (speed), where the results have them;
//  - under each chart, a table of the numbers it draws.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tkv {

struct ChartPoint {
  double x = 0, y = 0;
  double lo = 0, hi = 0;  // error bar (drawn when hi > lo)
  bool hollow = false;     // a variant of the series (e.g. mean centring off)
  std::string label;       // shown in the point's tooltip and the table
};

struct ChartSeries {
  std::string name;   // legend entry (the cache type)
  std::string color;
  bool line = false;  // join the points (in x order)
  std::vector<ChartPoint> points;
};

struct Chart {
  std::string title, x_label, y_label;  // labels carry the units
  bool log_y = false;
  std::string hollow_means;  // legend text for hollow markers, if any are drawn
  std::vector<ChartSeries> series;
};

// Ticks covering [lo, hi] at a nice step, about `target` of them; `decimals`
// gets the digits after the point their labels need to differ.
std::vector<double> nice_ticks(double lo, double hi, int target, int* decimals);
// Labels for ticks: fixed with `decimals`, or (log axes) the shortest %g
// precision that keeps every label distinct.
std::vector<std::string> tick_labels(const std::vector<double>& ticks, int decimals, bool log_axis);

// The chart as an SVG element followed by an HTML table of its numbers (and
// the list of points a log axis cannot show).
std::string chart_html(const Chart& c);

// The whole page from parsed JSON lines (`files`: how many files they came
// from, for the header).
std::string report_html(const std::vector<nlohmann::json>& rows, size_t files);

}  // namespace tkv
