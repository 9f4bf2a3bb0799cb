// The live line a long search prints (the brief: long work shows what is done and the best so far).
// On a terminal the line is rewritten in place; elsewhere (a log, CI) each report is its own line, and
// both are rate-limited so a search that prices thousands of candidates a second prints a few lines.
// The clock is injected so tests step it rather than sleep.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace loom::search {

struct Progress {
  std::string phase;        // what the search is doing now ("pricing", "planning top 4", "local search")
  std::int64_t done = 0;    // units of the phase finished (candidates, iterations)
  std::int64_t total = 0;   // 0 when unknown
  std::string best;         // the best so far in words ("dp 8 tp 8 pp 2: 14.2 s"); empty before the first
};

class ProgressLine {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  // Writes to `out` (nullptr: silent) at most once per `interval`; `in_place`: rewrite one line (a
  // terminal) rather than append lines.
  ProgressLine(std::FILE* out, bool in_place, std::chrono::milliseconds interval = std::chrono::milliseconds(250),
               Clock clock = std::chrono::steady_clock::now);
  // For stderr: in place when it is a terminal; silent when `enabled` is false (--json, --quiet).
  static ProgressLine for_stderr(bool enabled);

  // Reports `progress`; prints it when the interval has passed since the last print (the first always).
  void update(const Progress& progress);
  // Prints the last report unconditionally and ends the line; later updates start a new one.
  void finish();
  double elapsed_seconds() const;

  // "pricing 120/480 | best dp 8 tp 8: 14.2 s | 1.3 s": what update prints.
  static std::string format(const Progress& progress, double elapsed_seconds);

 private:
  void print();

  std::FILE* out_;
  bool in_place_;
  std::chrono::milliseconds interval_;
  Clock clock_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_print_;
  bool printed_ = false;
  bool line_open_ = false;
  std::size_t last_width_ = 0;
  Progress last_;
};

}  // namespace loom::search
