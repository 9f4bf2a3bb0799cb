// What `loom calibrate` measures of each plan, and how: the rank programs run by the runtime through
// python/loom_profile/plan_runs.py, whose results file (version 1) this reads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "profile_timer.h"

namespace loom::cli {

// One plan's measurements: `rounds` runs of the plan (the runner runs every plan once per round).
struct PlanRun {
  std::string name;
  std::vector<std::vector<double>> rounds;  // per round, the slowest rank's seconds of each step
  std::vector<double> load;                 // per round, the machine's 1-minute load average at its start
  std::vector<std::int64_t> peak_bytes;     // per rank (python/loom/runtime/memory.py)

  // A round's step: the median of its steps after the first (the first builds every op's form), or its
  // only step. The median drops a step another process stalled.
  double round_step(std::size_t round) const;
  // The plan's step: the fastest round's. Load from other processes only adds time, so the least disturbed
  // round is the closest to the machine the model describes (an idle one).
  double measured_step() const;
};

// One kind of communication's own α-β, measured apart (python -m loom_profile.cluster: gloo's all-reduce,
// all-gather, reduce-scatter and sends, each fitted to the simulator's price of that kind).
struct LinkFit {
  double alpha = 0;  // seconds per hop (a transfer's latency)
  double beta = 0;   // bytes/s
};

// The plans' runs and the runner's niceness (the ranks inherit it; -19 when run under `nice -n -19`).
struct PlanRuns {
  std::vector<PlanRun> runs;
  int nice = 0;
  std::optional<int> group_nice;  // its session's scheduling group's (Linux autogroup), where there is one
  std::map<std::string, LinkFit> links;  // by kind ("all_reduce", "all_gather", "reduce_scatter", "p2p")
  int links_world = 0;                   // the processes the links were measured among
};

// Runs the emitted programs in dirs[i] (named names[i]) for `steps` steps each, `repeats` rounds of every
// plan one after another, then measures the links among `links_world` processes (none below 2); the runner
// prints a progress line per plan and round to stderr. `scratch` holds the runs and results files.
Expected<PlanRuns> run_plans(const TimerSetup& python, const std::vector<std::string>& names,
                             const std::vector<std::string>& dirs, int steps, int repeats, int links_world,
                             const std::string& scratch);

// A results file as run_plans reads it: "runs" with every plan of `names` (in any order), each with at
// least one round of one step or more (a flat "step_s" list is one round) and one rank. Errors name the
// file and the plan.
Expected<PlanRuns> parse_plan_runs(const std::string& text, const std::string& source,
                                   const std::vector<std::string>& names);

// The results file's text (what parse_plan_runs reads).
std::string plan_runs_json(const PlanRuns& runs);

}  // namespace loom::cli
