#include "loom/search/plan_space.h"

#include <fmt/format.h>

namespace loom::search {
namespace {

constexpr int kMicroBatchSizes[] = {1, 2, 4, 8};
constexpr policy::Recompute kAllRecomputes[] = {policy::Recompute::none, policy::Recompute::selective,
                                                policy::Recompute::full};
constexpr policy::Recompute kZeroRecomputes[] = {policy::Recompute::none, policy::Recompute::full};

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Micro-batches per step for `dp` ranks of `mbs` samples; 0 when the batch does not divide.
int micro_batches_of(std::int64_t batch, int dp, int mbs) {
  const std::int64_t per_step = std::int64_t{dp} * mbs;
  return batch % per_step == 0 ? static_cast<int>(batch / per_step) : 0;
}

struct Schedule {
  plan::ScheduleKind kind;
  int chunks;
};

// The micro-batch sizes to try on dp ranks with pp stages: 1-8 where the micro-batches are independent
// or the pipeline runs GPipe; without a pipeline otherwise each rank's whole batch; none for a pipeline
// that cannot cut the batch.
std::vector<int> micro_batch_sizes(const SpaceFacts& f, const SpaceFilter& filter, int dp, int pp) {
  const bool coupled = f.micro_batching != MicroBatching::independent;
  if (!coupled || (pp > 1 && f.micro_batching == MicroBatching::forwards_first && filter.gpipe))
    return {std::begin(kMicroBatchSizes), std::end(kMicroBatchSizes)};
  if (pp > 1 || f.global_batch % dp != 0) return {};
  return {static_cast<int>(f.global_batch / dp)};
}

// The tensor-parallel degrees of the megatron and mixed families.
std::vector<int> tp_degrees(const SpaceFacts& f, const SpaceFilter& filter) {
  std::vector<int> out;
  for (int tp : {1, 2, 4, 8})
    if (f.gpus % tp == 0 && (tp <= f.gpus_per_node || filter.tp_across_nodes)) out.push_back(tp);
  return out;
}

void add_megatron(const SpaceFacts& f, const SpaceFilter& filter, std::vector<Candidate>& out) {
  for (int tp : tp_degrees(f, filter)) {
    const bool sp = tp > 1 && f.sequence_parallel(tp);
    for (int pp : divisors(f.gpus / tp)) {
      if (pp > 1 && f.layers > 0 && f.layers % pp != 0) continue;  // whole layers per stage, as Megatron-LM
      const int dp = f.gpus / (tp * pp);
      for (int mbs : micro_batch_sizes(f, filter, dp, pp)) {
        const int m = micro_batches_of(f.global_batch, dp, mbs);
        if (m == 0 || (pp > 1 && m < pp)) continue;  // a pipeline needs at least pp micro-batches
        std::vector<Schedule> schedules{{plan::ScheduleKind::one_f_one_b, 1}};
        if (pp > 1 && f.micro_batching != MicroBatching::independent) {
          schedules = {{plan::ScheduleKind::gpipe, 1}};
        } else {
          if (pp > 1 && m % pp == 0 && (f.layers == 0 || f.layers % (2 * pp) == 0))
            schedules.push_back({plan::ScheduleKind::one_f_one_b, 2});
          if (pp > 1 && filter.zero_bubble) schedules.push_back({plan::ScheduleKind::zb_h1, 1});
        }
        for (const Schedule& s : schedules) {
          policy::ParallelConfig c{.dp = dp, .tp = tp, .pp = pp, .micro_batches = m, .schedule = s.kind};
          c.virtual_stages = s.chunks;
          c.sequence_parallel = sp;
          std::vector<policy::Overlap> overlaps{policy::Overlap::none};
          if (filter.overlap && f.micro_batching == MicroBatching::independent && takes_overlap(c, mbs))
            overlaps.push_back(policy::Overlap::oases);
          for (policy::Overlap overlap : overlaps)
            for (policy::Recompute recompute : kAllRecomputes) {
              c.overlap = overlap;
              // Oases runs without sequence parallelism: its order cuts the sub-batches' segments at the
              // partial sums' collectives, and sp's all-gathers block inside them (gpt3-1.3b tp 4 mbs 4:
              // 516 ms overlapped, 532 ms with sp; llama-65b on 3090s, tp 8: 728 against 854 ms).
              c.sequence_parallel = sp && overlap == policy::Overlap::none;
              c.recompute = recompute;
              out.push_back({Family::megatron, "megatron", c, mbs});
            }
        }
      }
    }
  }
}

void add_zero(const SpaceFacts& f, const SpaceFilter& filter, std::vector<Candidate>& out) {
  for (int stage : {1, 2, 3})
    for (int mbs : micro_batch_sizes(f, filter, f.gpus, 1)) {
      const int m = micro_batches_of(f.global_batch, f.gpus, mbs);
      if (m == 0) continue;
      for (policy::Recompute recompute : kZeroRecomputes) {
        policy::ParallelConfig c{.dp = f.gpus, .micro_batches = m};
        c.zero = stage;
        c.recompute = recompute;
        out.push_back({Family::zero, "zero", std::move(c), mbs});
      }
    }
}

void add_mixed(const SpaceFacts& f, const SpaceFilter& filter, std::vector<Candidate>& out) {
  for (int tp : tp_degrees(f, filter)) {
    const bool sp = tp > 1 && f.sequence_parallel(tp);
    for (int pp : divisors(f.gpus / tp)) {
      if (pp > 1 && f.layers > 0 && f.layers % pp != 0) continue;
      const int dp = f.gpus / (tp * pp);
      if (dp == 1 || (tp == 1 && pp == 1)) continue;  // ZeRO needs dp ranks; tp = pp = 1 is the zero family
      const plan::ScheduleKind schedule = pp > 1 && f.micro_batching != MicroBatching::independent
                                              ? plan::ScheduleKind::gpipe
                                              : plan::ScheduleKind::one_f_one_b;
      for (int mbs : micro_batch_sizes(f, filter, dp, pp)) {
        const int m = micro_batches_of(f.global_batch, dp, mbs);
        if (m == 0 || (pp > 1 && m < pp)) continue;
        for (int stage : {1, 2, 3})
          for (policy::Recompute recompute : kZeroRecomputes) {
            policy::ParallelConfig c{.dp = dp, .tp = tp, .pp = pp, .micro_batches = m, .schedule = schedule};
            c.sequence_parallel = sp;
            c.zero = stage;
            c.recompute = recompute;
            out.push_back({Family::mixed, "megatron", std::move(c), mbs});
          }
      }
    }
  }
}

}  // namespace

std::string_view name(Family family) {
  switch (family) {
    case Family::megatron: return "megatron";
    case Family::zero: return "zero";
    case Family::mixed: return "mixed";
  }
  return "?";
}

std::vector<Candidate> enumerate_space(const SpaceFacts& facts, const SpaceFilter& filter) {
  std::vector<Candidate> out;
  if (filter.megatron) add_megatron(facts, filter, out);
  if (filter.zero) add_zero(facts, filter, out);
  if (filter.mixed) add_mixed(facts, filter, out);
  return out;
}

bool takes_overlap(const policy::ParallelConfig& config, std::int64_t micro_batch_size) {
  const bool one_chunk_1f1b_or_gpipe =
      config.virtual_stages == 1 &&
      (config.schedule == plan::ScheduleKind::one_f_one_b || config.schedule == plan::ScheduleKind::gpipe);
  return config.tp > 1 && micro_batch_size % 2 == 0 && (config.pp == 1 || one_chunk_1f1b_or_gpipe);
}

bool in_baseline_grids(const policy::ParallelConfig& config, int gpus_per_node) {
  return !plan::splits_backward(config.schedule) && (config.pp == 1 || config.schedule != plan::ScheduleKind::gpipe) &&
         config.overlap == policy::Overlap::none && (gpus_per_node == 0 || config.tp <= gpus_per_node);
}

std::string describe(const Candidate& candidate) {
  const policy::ParallelConfig& c = candidate.config;
  std::string schedule;
  if (c.pp > 1)
    schedule = c.virtual_stages > 1 ? fmt::format(" interleaved x{}", c.virtual_stages)
                                    : fmt::format(" {}", plan::name(c.schedule));
  return fmt::format("{} dp {} tp {} pp {} mbs {} m {}{}{}{}{}{}", candidate.policy, c.dp, c.tp, c.pp,
                     candidate.micro_batch_size, c.micro_batches, schedule, c.sequence_parallel ? " sp" : "",
                     c.overlap != policy::Overlap::none ? fmt::format(" {}", policy::name(c.overlap)) : std::string(),
                     c.zero > 0 ? fmt::format(" zero {}", c.zero) : std::string(),
                     c.recompute != policy::Recompute::none ? fmt::format(" recompute {}", policy::name(c.recompute))
                                                            : std::string());
}

}  // namespace loom::search
