#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace tkv {

Progress::Progress(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled && terminal()) {
  start_ = last_ = std::chrono::steady_clock::now();
}

bool Progress::terminal() { return ::isatty(::fileno(stderr)) == 1; }

namespace {
std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  char b[32];
  if (t >= 3600) std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(b, sizeof b, "%ld:%02ld", t / 60, t % 60);
  return b;
}
}  // namespace

std::string Progress::line(const std::string& label, int64_t count, int64_t total, const std::string& unit,
                           double rate, const std::string& detail) {
  char b[160];
  std::string s = label + ": " + std::to_string(count);
  if (total > 0) {
    std::snprintf(b, sizeof b, "/%lld (%.0f %%)", static_cast<long long>(total), 100.0 * count / total);
    s += b;
  }
  s += " " + unit;
  if (rate > 0) {
    std::snprintf(b, sizeof b, rate >= 100 ? ", %.0f %s/s" : ", %.2f %s/s", rate, unit.c_str());
    s += b;
    if (total > 0 && count < total) s += ", ETA " + clock_text((total - count) / rate);
  }
  if (!detail.empty()) s += ", " + detail;
  return s;
}

void Progress::update(int64_t count, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const bool last = total_ > 0 && count >= total_;
  if (!last && width_ > 0 && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  // The rate counts from the first update, not from construction: set-up
  // before the first item (loading, tokenizing) would read as slowness.
  if (first_count_ < 0) {
    first_count_ = count;
    start_ = now;
  }
  const double secs = std::chrono::duration<double>(now - start_).count();
  const std::string s = line(label_, count, total_, unit_, secs > 0 ? (count - first_count_) / secs : 0, detail);
  // Pad with spaces over a longer previous line rather than relying on
  // terminal escape codes.
  std::fprintf(stderr, "\r%s%*s", s.c_str(), static_cast<int>(width_ > s.size() ? width_ - s.size() : 0), "");
  std::fflush(stderr);
  width_ = s.size();
}

void Progress::clear() {
  if (!enabled_ || width_ == 0) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(width_), "");
  std::fflush(stderr);
  width_ = 0;
}

void Progress::done() {
  clear();
  enabled_ = false;
}

}  // namespace tkv
