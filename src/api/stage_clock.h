// Private to api: the wall clock of a job's stages (job.h StageSeconds), never written into files.
#pragma once

#include <chrono>

namespace loom::api {

class StageClock {
 public:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
};

}  // namespace loom::api
