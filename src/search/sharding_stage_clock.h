// The sharding solver's clock (sharding_solver.h): the solve's start (the caller's, when given), its
// deadline, the points each stage is given to end by (shares of the timeout), and the stages recorded
// against them for `loom solve-iopddl`'s stages line and --json. Every stage gets a deadline no later than
// the solve's.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/search/sharding_solver.h"

namespace loom::search {

class StageClock {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StageClock(const SolveOptions& options);

  std::optional<Clock::time_point> deadline() const { return deadline_; }
  // The point `share` of the timeout after the start; none without a timeout.
  std::optional<Clock::time_point> at_share(double share) const;
  // The point `share` of the timeout from now, at most the deadline; none without a timeout.
  std::optional<Clock::time_point> share_from_now(double share) const;
  bool expired() const { return deadline_ && Clock::now() >= *deadline_; }

  // A stage just ended, given until `allowed`, its best choice costing `cost` (none: no choice).
  void record(std::string name, std::optional<Clock::time_point> allowed, std::optional<std::int64_t> cost);
  // A stage had no time left to start.
  void skip(std::string name);
  std::vector<SolveStage> take_stages() { return std::move(stages_); }

 private:
  Clock::time_point after(double seconds) const;
  double since_start(Clock::time_point t) const;

  Clock::time_point started_;
  std::optional<Clock::time_point> deadline_;
  double timeout_ = 0;
  std::vector<SolveStage> stages_;
};

}  // namespace loom::search
