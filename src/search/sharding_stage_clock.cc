#include "sharding_stage_clock.h"

#include <algorithm>
#include <utility>

namespace loom::search {
namespace {

StageClock::Clock::duration seconds(double s) {
  return std::chrono::duration_cast<StageClock::Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

StageClock::StageClock(const SolveOptions& options)
    : started_(options.started.value_or(Clock::now())), timeout_(options.timeout_seconds) {
  if (options.timeout_seconds > 0) deadline_ = after(options.timeout_seconds);
}

std::optional<StageClock::Clock::time_point> StageClock::at_share(double share) const {
  if (!deadline_) return std::nullopt;
  return after(timeout_ * share);
}

std::optional<StageClock::Clock::time_point> StageClock::share_from_now(double share) const {
  if (!deadline_) return std::nullopt;
  return std::min(*deadline_, Clock::now() + seconds(timeout_ * share));
}

void StageClock::record(std::string name, std::optional<Clock::time_point> allowed, std::optional<std::int64_t> cost) {
  stages_.push_back(SolveStage{std::move(name), allowed ? since_start(*allowed) : 0, since_start(Clock::now()),
                               expired() ? SolveStage::End::kDeadline : SolveStage::End::kDone, cost});
}

void StageClock::skip(std::string name) {
  stages_.push_back(SolveStage{std::move(name), 0, since_start(Clock::now()), SolveStage::End::kSkipped, {}});
}

StageClock::Clock::time_point StageClock::after(double s) const { return started_ + seconds(s); }

double StageClock::since_start(Clock::time_point t) const {
  return std::chrono::duration<double>(t - started_).count();
}

}  // namespace loom::search
