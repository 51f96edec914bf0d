// One progress line for every long-running tool (bench, perplexity,
// calibrate, niah, cache build, kv-dump): "label: 12/40 (30 %), 3.1 chunks/s,
// ETA 0:09, detail", rewritten in place with a carriage return on a terminal.
// Progress goes to stderr and only to a terminal: when stderr is a file or a
// pipe nothing is printed (the tool's results are the output), and
// --no-progress turns it off everywhere. done() clears the line so that what
// follows starts on a clean one.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tkv {

class Progress {
 public:
  // total <= 0: no percentage or ETA (just the count and the rate).
  // `unit` names what is counted ("chunks", "tokens", "runs").
  Progress(std::string label, int64_t total, std::string unit, bool enabled = true);
  ~Progress() { done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `count` items are done; `detail` follows the rate (e.g. "PPL 17.2").
  // Redrawn at most 10 times a second (and always at the last item).
  void update(int64_t count, const std::string& detail = "");
  // Blanks the line (on a terminal) before other output; the next update
  // draws it again.
  void clear();
  // Clears the line; later updates are ignored.
  void done();
  // When the total is known only once the work has started.
  void set_total(int64_t total) { total_ = total; }
  bool active() const { return enabled_; }

  // Whether stderr is a terminal (progress is drawn only there).
  static bool terminal();
  // The text of one update, exposed for tests; rate in items per second
  // (0: not known yet, no rate or ETA).
  static std::string line(const std::string& label, int64_t count, int64_t total, const std::string& unit,
                          double rate, const std::string& detail);

 private:
  std::string label_, unit_;
  int64_t total_;
  bool enabled_;
  size_t width_ = 0;  // characters of the last line drawn (to blank it)
  int64_t first_count_ = -1;  // the count at the first update (the rate counts from there)
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tkv
