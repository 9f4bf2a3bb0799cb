// The interlaced pipeline's evaluator (plan/interlaced_schedule.h): stage blocks as schedule_eval.h runs
// them, shared blocks as barriers of every device.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/plan/interlaced_schedule.h"

namespace loom::plan {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::infinity();

std::size_t us(int i) { return static_cast<std::size_t>(i); }

std::vector<InterlacedBlock> shared_of(const std::vector<InterlacedBlock>& seq) {
  std::vector<InterlacedBlock> out;
  for (const InterlacedBlock& b : seq)
    if (b.shared != SharedPart::none) out.push_back(b);
  return out;
}

// Every device's stage blocks are its own F and B of each micro-batch once; every device lists the same
// shared blocks, each (part, micro-batch) once.
Expected<void> check_blocks(const std::vector<std::vector<InterlacedBlock>>& devices, int micro_batches) {
  const std::vector<InterlacedBlock> shared = shared_of(devices.front());
  std::vector<int> shared_count(3 * us(micro_batches), 0);
  for (const InterlacedBlock& b : shared) {
    if (b.block.micro_batch < 0 || b.block.micro_batch >= micro_batches)
      return fail(fmt::format("evaluate_interlaced: shared block {} lies outside {} micro-batches", to_string(b),
                              micro_batches));
    if (++shared_count[(us(static_cast<int>(b.shared)) - 1) * us(micro_batches) + us(b.block.micro_batch)] > 1)
      return fail(fmt::format("evaluate_interlaced: shared block {} is listed twice", to_string(b)));
  }
  if (shared.size() != 3 * us(micro_batches))
    return fail(fmt::format("evaluate_interlaced: {} shared blocks for {} micro-batches", shared.size(), micro_batches),
                "list E, H and G of every micro-batch once");
  const int stages = static_cast<int>(devices.size());
  for (int s = 0; s < stages; ++s) {
    if (shared_of(devices[us(s)]) != shared)
      return fail(fmt::format("evaluate_interlaced: device {} runs other shared blocks, or in another order, than "
                              "device 0",
                              s),
                  "a shared block is a collective of every device: list them in one order everywhere");
    std::vector<int> count(2 * us(micro_batches), 0);
    for (const InterlacedBlock& b : devices[us(s)]) {
      if (b.shared != SharedPart::none) continue;
      const Block& x = b.block;
      if (x.stage != s || x.part == BlockPart::weight || x.micro_batch < 0 || x.micro_batch >= micro_batches)
        return fail(fmt::format("evaluate_interlaced: block {} of stage {} does not belong on device {}", to_string(b),
                                x.stage, s));
      if (++count[us(static_cast<int>(x.part)) * us(micro_batches) + us(x.micro_batch)] > 1)
        return fail(fmt::format("evaluate_interlaced: block {} of stage {} is listed twice", to_string(b), s));
    }
    if (std::ranges::find(count, 0) != count.end())
      return fail(fmt::format("evaluate_interlaced: device {} misses a stage block", s),
                  "list the F and B of every micro-batch once on its stage's device");
  }
  return {};
}

}  // namespace

Expected<void> check_interlaced_costs(const InterlacedCosts& costs, int stages, std::string_view who) {
  if (costs.forward.size() != us(stages) || costs.backward.size() != us(stages))
    return fail(fmt::format("{}: costs for {} and {} stages, the pipeline has {}", who, costs.forward.size(),
                            costs.backward.size(), stages));
  std::vector<double> all = costs.forward;
  all.insert(all.end(), costs.backward.begin(), costs.backward.end());
  all.insert(all.end(), {costs.embed_forward, costs.head, costs.embed_backward});
  for (double c : all)
    if (!std::isfinite(c) || c < 0)
      return fail(fmt::format("{}: a block costs {} s", who, c), "block costs are finite and at least 0");
  return {};
}

Expected<ScheduleEvaluation> evaluate_interlaced(const std::vector<std::vector<InterlacedBlock>>& devices,
                                                 int micro_batches, std::span<const int> embedding_readers,
                                                 const InterlacedCosts& costs) {
  const int S = static_cast<int>(devices.size());
  if (S < 1 || micro_batches < 1)
    return fail(fmt::format("evaluate_interlaced: {} stages and {} micro-batches; each must be at least 1", S,
                            micro_batches));
  LOOM_RETURN_IF_ERROR(check_interlaced_costs(costs, S, "evaluate_interlaced"));
  std::vector<bool> reads(us(S), false);
  for (int s : embedding_readers) {
    if (s < 0 || s >= S) return fail(fmt::format("evaluate_interlaced: reader stage {} is outside [0, {})", s, S));
    reads[us(s)] = true;
  }
  LOOM_RETURN_IF_ERROR(check_blocks(devices, micro_batches));
  const auto M = us(micro_batches);
  // When each block ended, kNotYet before: stage blocks by (stage, micro-batch), shared by micro-batch.
  std::vector<double> end_f(us(S) * M, kNotYet), end_b(end_f), end_e(M, kNotYet), end_h(end_e), end_g(end_e);
  const auto inputs_done = [&](int s, const InterlacedBlock& ib) {
    const auto m = us(ib.block.micro_batch);
    switch (ib.shared) {
      case SharedPart::embed_forward: return 0.0;
      case SharedPart::head: return end_f[us(S - 1) * M + m];
      case SharedPart::embed_backward: {
        double t = 0;
        for (int r = 0; r < S; ++r)
          if (reads[us(r)]) t = std::max(t, end_b[us(r) * M + m]);
        return t;
      }
      case SharedPart::none: break;
    }
    if (ib.block.part == BlockPart::forward)
      return std::max(s == 0 ? 0.0 : end_f[us(s - 1) * M + m], reads[us(s)] ? end_e[m] : 0.0);
    return std::max(end_f[us(s) * M + m], s + 1 == S ? end_h[m] : end_b[us(s + 1) * M + m]);
  };
  const auto cost = [&](int s, const InterlacedBlock& ib) {
    switch (ib.shared) {
      case SharedPart::embed_forward: return costs.embed_forward;
      case SharedPart::head: return costs.head;
      case SharedPart::embed_backward: return costs.embed_backward;
      case SharedPart::none: break;
    }
    return (ib.block.part == BlockPart::forward ? costs.forward : costs.backward)[us(s)];
  };

  ScheduleEvaluation result;
  result.idle.assign(us(S), 0);
  result.peak_held.assign(us(S), 0);
  std::vector<std::size_t> next(us(S), 0);
  std::vector<double> free(us(S), 0), busy(us(S), 0), first(us(S), kNotYet);
  std::vector<int> held(us(S), 0);
  const auto finish = [&](int s, const InterlacedBlock& ib, double start) {
    first[us(s)] = std::min(first[us(s)], start);
    free[us(s)] = start + cost(s, ib);
    busy[us(s)] += cost(s, ib);
    ++next[us(s)];
  };
  // As evaluate_schedule: every device runs as far as it can, round after round; a shared block runs once
  // it is next on every device (then every device is free of what came before it). A round without
  // progress while blocks remain is a deadlock.
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s)
      while (next[us(s)] < devices[us(s)].size() && devices[us(s)][next[us(s)]].shared == SharedPart::none) {
        const InterlacedBlock& ib = devices[us(s)][next[us(s)]];
        const double ready = inputs_done(s, ib);
        if (ready == kNotYet) break;
        const double start = std::max(ready, free[us(s)]);
        const std::size_t at = us(s) * M + us(ib.block.micro_batch);
        if (ib.block.part == BlockPart::forward) {
          result.peak_held[us(s)] = std::max(result.peak_held[us(s)], ++held[us(s)]);
        } else {
          --held[us(s)];
        }
        finish(s, ib, start);
        (ib.block.part == BlockPart::forward ? end_f : end_b)[at] = free[us(s)];
        progress = true;
      }
    const auto at_shared = [&](int s) {
      return next[us(s)] < devices[us(s)].size() && devices[us(s)][next[us(s)]].shared != SharedPart::none;
    };
    bool everywhere = true;
    for (int s = 0; s < S; ++s) everywhere = everywhere && at_shared(s);
    if (!everywhere) continue;
    const InterlacedBlock ib = devices.front()[next.front()];
    double start = inputs_done(0, ib);
    if (start == kNotYet) continue;
    for (double f : free) start = std::max(start, f);
    for (int s = 0; s < S; ++s) finish(s, ib, start);
    const auto m = us(ib.block.micro_batch);
    (ib.shared == SharedPart::embed_forward ? end_e : ib.shared == SharedPart::head ? end_h : end_g)[m] = free.front();
    progress = true;
  }
  std::vector<std::string> waiting;
  for (int s = 0; s < S; ++s)
    if (next[us(s)] < devices[us(s)].size())
      waiting.push_back(fmt::format("device {} at {}", s, to_string(devices[us(s)][next[us(s)]])));
  if (!waiting.empty())
    return fail(fmt::format("evaluate_interlaced: the order deadlocks ({})", join(waiting, ", ")),
                "each block's inputs must come before it, and a shared block where every device can reach it");
  for (int s = 0; s < S; ++s) {
    result.makespan = std::max(result.makespan, free[us(s)]);
    result.idle[us(s)] = devices[us(s)].empty() ? 0 : free[us(s)] - first[us(s)] - busy[us(s)];
  }
  return result;
}

}  // namespace loom::plan
