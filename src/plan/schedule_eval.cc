#include "loom/plan/schedule_eval.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "loom/core/strings.h"

namespace loom::plan {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

struct Table {
  int stages, micro_batches;
  std::vector<double> end;  // by (part, stage, micro-batch): when the block ended, kNotYet before
  std::vector<int> count;   // by the same index: how often the template lists the block

  std::size_t index(int part, int s, int m) const {
    return (static_cast<std::size_t>(part) * static_cast<std::size_t>(stages) + static_cast<std::size_t>(s)) *
               static_cast<std::size_t>(micro_batches) + static_cast<std::size_t>(m);
  }
  std::size_t index(const Block& b) const { return index(static_cast<int>(b.part), b.stage, b.micro_batch); }
};

}  // namespace

Expected<ScheduleEvaluation> evaluate_schedule(const std::vector<std::vector<Block>>& devices, int stages,
                                               int micro_batches, BlockCosts costs) {
  if (stages < 1 || micro_batches < 1)
    return fail(fmt::format("evaluate_schedule: {} stages and {} micro-batches; each must be at least 1", stages,
                            micro_batches));
  Table table{stages, micro_batches, {}, {}};
  const std::size_t cells = 3 * static_cast<std::size_t>(stages) * static_cast<std::size_t>(micro_batches);
  table.end.assign(cells, kNotYet);
  table.count.assign(cells, 0);
  for (const auto& seq : devices)
    for (const Block& b : seq) {
      if (b.stage < 0 || b.stage >= stages || b.micro_batch < 0 || b.micro_batch >= micro_batches)
        return fail(fmt::format("evaluate_schedule: block {} of stage {} lies outside {} stages and {} micro-batches",
                                to_string(b), b.stage, stages, micro_batches));
      if (++table.count[table.index(b)] > 1)
        return fail(fmt::format("evaluate_schedule: block {} of stage {} is listed twice", to_string(b), b.stage));
    }
  // Leading stages may run forward only (a recycled pass, schedule_3f1b.h): no B or W for any micro-batch.
  std::vector<bool> forward_only(static_cast<std::size_t>(stages), false);
  for (int s = 0; s < stages; ++s) {
    int weights = 0, backwards = 0;
    for (int m = 0; m < micro_batches; ++m) {
      backwards += table.count[table.index(1, s, m)];
      weights += table.count[table.index(2, s, m)];
    }
    forward_only[static_cast<std::size_t>(s)] = backwards == 0 && weights == 0 && s + 1 < stages &&
                                                (s == 0 || forward_only[static_cast<std::size_t>(s - 1)]);
    for (int m = 0; m < micro_batches; ++m)
      for (int part = 0; part < (forward_only[static_cast<std::size_t>(s)] ? 1 : 2); ++part)
        if (table.count[table.index(part, s, m)] == 0)
          return fail(fmt::format("evaluate_schedule: stage {} has no {}{}", s, part_letter(static_cast<BlockPart>(part)), m),
                      backwards == 0 && part == 1 ? "only leading stages (recycled passes) may run forward only"
                                                  : "list every block of every stage once");
    if (weights != 0 && weights != micro_batches)
      return fail(fmt::format("evaluate_schedule: stage {} has W blocks for {} of its {} micro-batches", s, weights,
                              micro_batches),
                  "split every micro-batch's backward or none");
  }
  const auto split = [&](int s) { return table.count[table.index(2, s, 0)] != 0; };
  const auto cost = [&](const Block& b) {
    if (b.part == BlockPart::forward) return costs.forward;
    if (b.part == BlockPart::weight) return costs.weight;
    return split(b.stage) ? costs.backward : costs.backward + costs.weight;
  };
  // When block b may start, kNotYet while an input is missing.
  const auto inputs_done = [&](const Block& b) {
    const auto end = [&](int part, int s) { return table.end[table.index(part, s, b.micro_batch)]; };
    if (b.part == BlockPart::forward) return b.stage == 0 ? 0.0 : end(0, b.stage - 1);
    if (b.part == BlockPart::weight) return end(1, b.stage);
    return std::max(end(0, b.stage), b.stage + 1 == stages ? 0.0 : end(1, b.stage + 1));
  };

  const std::size_t n = devices.size();
  ScheduleEvaluation result;
  result.idle.assign(n, 0);
  result.peak_held.assign(n, 0);
  std::vector<std::size_t> next(n, 0);
  std::vector<double> free(n, 0), first(n, 0), busy(n, 0);
  std::vector<int> held(n, 0);
  // Start times follow from the inputs and the device's previous block alone, so running every device as
  // far as it can, round after round, gives the same times as any other order; a round without progress
  // while blocks remain is a deadlock.
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t d = 0; d < n; ++d)
      while (next[d] < devices[d].size()) {
        const Block& b = devices[d][next[d]];
        const double ready = inputs_done(b);
        if (ready == kNotYet) break;
        const double start = std::max(ready, free[d]);
        if (next[d] == 0) first[d] = start;
        free[d] = start + cost(b);
        busy[d] += cost(b);
        table.end[table.index(b)] = free[d];
        // Activations are held from F until W, or until B when the backward is whole.
        // A forward-only stage keeps nothing for a backward.
        if (b.part == BlockPart::forward) {
          if (!forward_only[static_cast<std::size_t>(b.stage)])
            result.peak_held[d] = std::max(result.peak_held[d], ++held[d]);
        }
        else if (b.part == BlockPart::weight || !split(b.stage)) --held[d];
        ++next[d];
        progress = true;
      }
  }
  std::vector<std::string> waiting;
  for (std::size_t d = 0; d < n; ++d)
    if (next[d] < devices[d].size()) waiting.push_back(fmt::format("device {} at {}", d, to_string(devices[d][next[d]])));
  if (!waiting.empty())
    return fail(fmt::format("evaluate_schedule: the template deadlocks ({})", join(waiting, ", ")),
                "each block's inputs must come before it on some device");
  for (std::size_t d = 0; d < n; ++d) {
    result.makespan = std::max(result.makespan, free[d]);
    result.idle[d] = devices[d].empty() ? 0 : free[d] - first[d] - busy[d];
  }
  return result;
}

}  // namespace loom::plan
