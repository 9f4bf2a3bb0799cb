// The interlaced pipeline's order on real costs (plan/interlaced_schedule.h, search_interlaced): 1F1B's
// stage blocks on every device, one barrier per micro-batch at its H, where each device joins found by a
// pilot search.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "loom/plan/interlaced_schedule.h"

namespace loom::plan {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

std::size_t us(int i) { return static_cast<std::size_t>(i); }

InterlacedBlock shared_block(SharedPart part, int m) { return {.shared = part, .block = {.micro_batch = m}}; }

// One candidate of the family: how many H's share a barrier, each device's warm-up, and which blocks run
// before a barrier by default.
struct Shape {
  int group = 1;  // H's per barrier (the last stage runs that many F's before them)
  int extra = 0;  // forwards beyond 1F1B's S - s in each device's warm-up (at most its cap), so a device
                  // may run ahead instead of waiting at a barrier
  bool by_end = false;  // by default a device runs before a barrier the blocks that end by the time it
                        // is ready, else those that start before then

  std::string name() const {
    return fmt::format("{} H per barrier, warm-up min(cap, max(S - s + {}, {})), join {}", group, extra, group,
                       by_end ? "before a block that would delay it" : "after the running block");
  }
};

// Per device, its warm-up: min(cap, max(S - s + extra, group)).
std::vector<int> warm_ups(const std::vector<int>& caps, const Shape& shape) {
  const int stages = static_cast<int>(caps.size());
  std::vector<int> out;
  for (int s = 0; s < stages; ++s)
    out.push_back(std::min(caps[us(s)], std::max(stages - s + shape.extra, shape.group)));
  return out;
}

// 1F1B with `warm_up[s]` forwards first on device s, then backward / forward pairs, then the backwards.
std::vector<std::vector<Block>> one_f_one_b(int micro_batches, const std::vector<int>& warm_up) {
  std::vector<std::vector<Block>> out(warm_up.size());
  for (std::size_t s = 0; s < warm_up.size(); ++s) {
    const int stage = static_cast<int>(s), w = std::min(warm_up[s], micro_batches);
    for (int m = 0; m < w; ++m) out[s].push_back({stage, m, BlockPart::forward});
    for (int m = 0; m < micro_batches; ++m) {
      out[s].push_back({stage, m, BlockPart::backward});
      if (m + w < micro_batches) out[s].push_back({stage, m + w, BlockPart::forward});
    }
  }
  return out;
}

// The order being built, in time: per device its next stage block and when it is free; per block when
// it ended. The H's of micro-batches [0, headed) are done.
struct Builder {
  int S, M;
  Shape shape;
  const std::vector<bool>* reads;
  const InterlacedCosts* costs;
  std::vector<std::vector<Block>> pipeline;  // per device, its stage blocks in order
  std::vector<std::size_t> next;
  std::vector<double> free, end_f, end_b, end_e, end_h;
  int headed = 0;
  bool closed = false;
  std::vector<std::vector<InterlacedBlock>> seq;
  std::vector<double> ended;  // the end of every stage block run since the last clear (join candidates)

  Builder(int stages, int micro_batches, Shape candidate, const std::vector<int>& caps,
          const std::vector<bool>& readers, const InterlacedCosts& block_costs)
      : S(stages),
        M(micro_batches),
        shape(candidate),
        reads(&readers),
        costs(&block_costs),
        next(us(stages), 0),
        free(us(stages), 0),
        end_f(us(stages * micro_batches), kNotYet),
        end_b(end_f),
        end_e(us(micro_batches), kNotYet),
        end_h(end_e),
        seq(us(stages)) {
    pipeline = one_f_one_b(M, warm_ups(caps, shape));
  }

  double cost(int s, const Block& b) const {
    return (b.part == BlockPart::forward ? costs->forward : costs->backward)[us(s)];
  }

  // When device s's next stage block may start, kNotYet while an input is missing.
  double start_of(int s) const {
    if (next[us(s)] >= pipeline[us(s)].size()) return kNotYet;
    const Block& b = pipeline[us(s)][next[us(s)]];
    const auto m = us(b.micro_batch);
    double inputs = 0;
    if (b.part == BlockPart::forward) {
      if (s > 0) inputs = end_f[us(s - 1) * us(M) + m];
      if ((*reads)[us(s)]) inputs = std::max(inputs, end_e[m]);
    } else {
      inputs = std::max(end_f[us(s) * us(M) + m], s + 1 == S ? end_h[m] : end_b[us(s + 1) * us(M) + m]);
    }
    return inputs == kNotYet ? kNotYet : std::max(inputs, free[us(s)]);
  }

  // Every device runs, as far as it can, its stage blocks that start before `threshold` (by_end: that
  // end by it).
  void run_until(double threshold, bool by_end) {
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < S; ++s)
        for (double start = start_of(s); start != kNotYet; start = start_of(s)) {
          const Block& b = pipeline[us(s)][next[us(s)]];
          const double end = start + cost(s, b);
          if (by_end ? end > threshold : start >= threshold) break;
          ++next[us(s)];
          free[us(s)] = end;
          (b.part == BlockPart::forward ? end_f : end_b)[us(s) * us(M) + us(b.micro_batch)] = end;
          seq[us(s)].push_back({.block = b});
          ended.push_back(end);
          progress = true;
        }
    }
  }

  // A barrier: every device, once all are free, runs `blocks` (their inputs have run).
  void barrier(const std::vector<InterlacedBlock>& blocks) {
    if (blocks.empty()) return;
    double t = *std::ranges::max_element(free);
    for (const InterlacedBlock& b : blocks) {
      const auto m = us(b.block.micro_batch);
      switch (b.shared) {
        case SharedPart::embed_forward: t += costs->embed_forward, end_e[m] = t; break;
        case SharedPart::head: t += costs->head, end_h[m] = t; break;
        case SharedPart::embed_backward: t += costs->embed_backward; break;
        case SharedPart::none: break;
      }
    }
    for (int s = 0; s < S; ++s) {
      free[us(s)] = t;
      seq[us(s)].insert(seq[us(s)].end(), blocks.begin(), blocks.end());
    }
  }

  // The last micro-batch of the next barrier's H's.
  int group_end() const { return std::min(M, headed + shape.group); }

  // Before anything, every E: they need nothing, and every device is free then.
  void open() {
    std::vector<InterlacedBlock> blocks;
    for (int m = 0; m < M; ++m) blocks.push_back(shared_block(SharedPart::embed_forward, m));
    barrier(blocks);
  }

  // Where the next barrier's inputs are done (the last stage's F of its last H), and the ends of the
  // blocks after it that the devices could run before it: the thresholds at which they may join it.
  std::vector<double> join_candidates(std::size_t most) const {
    Builder probe = *this;
    probe.ended.clear();
    probe.run_until(kNotYet, false);
    const double ready = probe.end_f[us(S - 1) * us(M) + us(group_end() - 1)];
    std::vector<double> out{ready}, later;
    for (double t : probe.ended)
      if (t > ready) later.push_back(t);
    std::ranges::sort(later);
    for (double t : later)
      if (out.size() < most && t > out.back()) out.push_back(t);
    return out;
  }

  // The next barrier, joined by the blocks that end by `threshold` (by_end) or start before it; with
  // start, the last stage's F (and anything else that starts before it ends) joins at least.
  void head_barrier(double threshold, bool by_end) {
    run_until(threshold, by_end);
    if (!by_end) run_until(threshold, true);
    std::vector<InterlacedBlock> blocks;
    const int last = group_end();
    for (; headed < last; ++headed) blocks.push_back(shared_block(SharedPart::head, headed));
    barrier(blocks);
  }

  // After the last H: the stage blocks left, then every G (each needs its readers' backward, and runs
  // where no device has anything else to do).
  void close() {
    run_until(kNotYet, false);
    std::vector<InterlacedBlock> blocks;
    for (int m = 0; m < M; ++m) blocks.push_back(shared_block(SharedPart::embed_backward, m));
    barrier(blocks);
    closed = true;
  }

  bool complete() const {
    if (headed < M || !closed) return false;
    for (int s = 0; s < S; ++s)
      if (next[us(s)] < pipeline[us(s)].size()) return false;
    return true;
  }

  // (makespan, sum of the devices' ends).
  std::pair<double, double> price() const {
    if (!complete()) return {kNotYet, kNotYet};
    double makespan = 0, sum = 0;
    for (double f : free) makespan = std::max(makespan, f), sum += f;
    return {makespan, sum};
  }
};

// Completes `b` joining every barrier by the shape's default rule, at the time it is ready.
void complete_greedily(Builder& b) {
  while (b.headed < b.M) b.head_barrier(b.join_candidates(1).front(), b.shape.by_end);
  b.close();
}

// At each barrier, each join threshold (by the end of a block, or the default rule at the time it is
// ready) completed greedily and the cheapest taken (ties to the default). Once `rollouts` reaches the
// budget, the barriers left take the default rule.
Builder pilot_search(Builder b, std::int64_t& rollouts, std::int64_t budget) {
  while (b.headed < b.M) {
    const std::vector<double> thresholds = b.join_candidates(us(b.S) + 1);
    std::pair<double, bool> pick{thresholds.front(), b.shape.by_end};
    std::pair<double, double> best{kNotYet, kNotYet};
    for (std::size_t c = 0; c < thresholds.size(); ++c)
      for (bool by_end : {b.shape.by_end, !b.shape.by_end}) {
        if (c > 0 && !by_end) continue;  // later thresholds name where a block ends
        if (rollouts >= budget) break;
        Builder trial = b;
        trial.head_barrier(thresholds[c], by_end);
        complete_greedily(trial);
        ++rollouts;
        if (const auto price = trial.price(); price < best) best = price, pick = {thresholds[c], by_end};
      }
    b.head_barrier(pick.first, pick.second);
  }
  b.close();
  return b;
}

double idle_sum(const ScheduleEvaluation& e) {
  double sum = 0;
  for (double i : e.idle) sum += i;
  return sum;
}

}  // namespace

Expected<InterlacedSearch> search_interlaced(int stages, int micro_batches, std::span<const int> embedding_readers,
                                             const InterlacedCosts& costs, std::span<const int> most_held) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<InterlacedBlock>> lockstep,
                        interlaced_blocks(stages, micro_batches, embedding_readers));
  LOOM_RETURN_IF_ERROR(check_interlaced_costs(costs, stages, "interlaced search"));
  if (!most_held.empty() && most_held.size() != us(stages))
    return fail(fmt::format("interlaced search: held-micro-batch caps for {} stages, the pipeline has {}",
                            most_held.size(), stages),
                "give one cap per stage, or none for 1F1B's peak S on every stage");
  std::vector<bool> reads(us(stages), false);
  for (int s : embedding_readers) reads[us(s)] = true;
  // Per stage the most micro-batches it may hold: the given cap, never below 1F1B's own S - s nor above
  // every micro-batch; none given, 1F1B's peak S (stage 0's) on every stage.
  std::vector<int> caps;
  for (int s = 0; s < stages; ++s)
    caps.push_back(std::min(micro_batches, most_held.empty() ? stages : std::max(stages - s, most_held[us(s)])));
  const auto within_caps = [&](const ScheduleEvaluation& e) {
    for (int s = 0; s < stages; ++s)
      if (e.peak_held[us(s)] > caps[us(s)]) return false;
    return true;
  };
  const auto key = [](const ScheduleEvaluation& e) { return std::pair{e.makespan, idle_sum(e)}; };

  std::optional<InterlacedSearch> best;
  LOOM_ASSIGN_OR_RETURN(ScheduleEvaluation unit_cost,
                        evaluate_interlaced(lockstep, micro_batches, embedding_readers, costs));
  if (within_caps(unit_cost))
    best = InterlacedSearch{.devices = std::move(lockstep), .evaluation = std::move(unit_cost), .order = "lockstep"};
  std::int64_t rollouts = 0;
  // A greedy completion walks every block and barrier, about (S m)^2 steps as measured (S 8, m 32: 30 us;
  // S 16, m 128: 4 ms); the roll-outs are bounded so that work stays near kWork steps (~1-2 s here),
  // counted, not timed, so the result stays deterministic. Small pipelines never reach it.
  constexpr double kWork = 2e9;
  const double size = static_cast<double>(stages) * micro_batches;
  const auto budget = std::max<std::int64_t>(64, static_cast<std::int64_t>(kWork / (size * size)));
  // The family, each completed greedily; the pilot search refines the few best. A group's H's need its
  // last F on the last stage, hence on every stage before B's: a group is at most the least cap.
  // Shapes whose warm-ups the caps make equal are one candidate (the first).
  std::vector<std::pair<std::pair<double, double>, Shape>> greedy;
  std::set<std::tuple<int, std::vector<int>, bool>> seen;
  const int most_group = std::min(micro_batches, *std::ranges::min_element(caps));
  const int most_extra = *std::ranges::max_element(caps);
  for (int group = 1; group <= most_group; ++group)
    for (int extra = 0; extra < most_extra; ++extra)
      for (bool by_end : {false, true}) {
        const Shape shape{group, extra, by_end};
        if (!greedy.empty() && rollouts >= budget) break;
        if (!seen.emplace(group, warm_ups(caps, shape), by_end).second) continue;
        Builder b(stages, micro_batches, shape, caps, reads, costs);
        b.open();
        complete_greedily(b);
        ++rollouts;
        greedy.emplace_back(b.price(), shape);
      }
  std::ranges::stable_sort(greedy, {}, [](const auto& g) { return g.first; });
  constexpr std::size_t kRefined = 4;
  for (std::size_t i = 0; i < std::min(kRefined, greedy.size()); ++i) {
    const Shape& shape = greedy[i].second;
    Builder start(stages, micro_batches, shape, caps, reads, costs);
    start.open();
    Builder built = pilot_search(std::move(start), rollouts, budget);
    if (!built.complete())
      return fail(fmt::format("interlaced search: the order for {} stages and {} micro-batches did not complete", stages,
                              micro_batches),
                  "report this: 1F1B's blocks with barriers at the H's always complete");
    LOOM_ASSIGN_OR_RETURN(ScheduleEvaluation evaluation,
                          with_context(evaluate_interlaced(built.seq, micro_batches, embedding_readers, costs),
                                       "interlaced search"));
    if (!within_caps(evaluation))
      return fail(fmt::format("interlaced search: the order '{}' holds more micro-batches than its caps", shape.name()),
                  "report this: a device's warm-up bounds what it holds");
    if (!best || key(evaluation) < key(best->evaluation))
      best = InterlacedSearch{.devices = std::move(built.seq),
                              .evaluation = std::move(evaluation),
                              .order = shape.name(),
                              .group = shape.group,
                              .extra = shape.extra};
  }
  // The first shape (1 H per barrier, 1F1B's warm-ups) is within every cap, so a candidate is.
  best->rollouts = rollouts;
  best->caps = std::move(caps);
  return std::move(*best);
}

}  // namespace loom::plan
