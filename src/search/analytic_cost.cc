#include "loom/search/analytic_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "loom/plan/schedule_eval.h"
#include "loom/policy/plan_size.h"

namespace loom::search {
namespace {

constexpr std::int64_t kBucketBytes = 25LL << 20;  // DDP's bucket_cap_mb (exec/passes.h's default)

// What a collective's member sends: 2 (n - 1) / n S for an all-reduce, (n - 1) / n S otherwise.
std::int64_t sent(comm::Primitive kind, std::size_t n, std::int64_t bytes) {
  const double share = static_cast<double>(n - 1) / static_cast<double>(n);
  return static_cast<std::int64_t>((kind == comm::Primitive::all_reduce ? 2.0 : 1.0) * share * static_cast<double>(bytes));
}

// Segment state under ZeRO `zero` over `dp` ranks, `count` copies (a stage's layers).
StateBytes zero_state(const SegmentState& s, int zero, int dp, double count) {
  const double kept = dp > 1 && zero > 0 ? s.zero_fraction(dp) : 1.0;
  const auto part = [&](std::int64_t bytes, int from_stage) {
    return static_cast<std::int64_t>(static_cast<double>(bytes) * count * (zero >= from_stage ? kept : 1.0));
  };
  return {part(s.bytes.parameter, 3), part(s.bytes.gradient, 2), part(s.bytes.optimizer, 1)};
}

StateBytes plus(StateBytes a, const StateBytes& b) {
  a.parameter += b.parameter;
  a.gradient += b.gradient;
  a.optimizer += b.optimizer;
  return a;
}

// The dp groups of pipeline stage 0, one per tp rank (concurrent: they share the nodes' NICs).
std::vector<std::vector<int>> dp_groups(const policy::ParallelConfig& c) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(c.tp));
  for (int t = 0; t < c.tp; ++t)
    for (int d = 0; d < c.dp; ++d) groups[static_cast<std::size_t>(t)].push_back(policy::device_of(c, 0, d, t));
  return groups;
}

// Whether the job pipeline folds the candidate cheaply when it is large (api/job_load.cc): megatron folds
// over replicas and micro-batches, ZeRO (policies zero and megatron) where policy::zero_folds says and within
// one node. A ZeRO-1 slice across nodes folds too, but it keeps every node's replicas and the hierarchical
// routes of their gradients and shards (llama3-8b's dp 64: ~10 instructions per sub-op, most of its plan's
// time), which the plan-size estimate does not see: priced as its explicit plan, as before it folded.
bool foldable(const Candidate& candidate, bool preset, int gpus_per_node) {
  const policy::ParallelConfig& c = candidate.config;
  return (candidate.policy == "megatron" || candidate.policy == "zero") && preset && !plan::splits_backward(c.schedule) &&
         (c.zero == 0 || (c.micro_batches > 1 && policy::zero_folds(c, gpus_per_node) &&
                          c.dp * c.tp * c.pp <= gpus_per_node));
}

}  // namespace

double SegmentState::zero_fraction(int dp) const {
  double total = 0, kept = 0;
  for (const std::vector<std::int64_t>& shape : shapes) {
    double numel = 1;
    for (std::int64_t d : shape) numel *= static_cast<double>(d);
    total += numel;
    kept += std::ranges::any_of(shape, [&](std::int64_t d) { return d % dp == 0; }) ? numel / dp : numel;
  }
  return total > 0 ? kept / total : 1.0 / dp;
}

ClassKey class_of(const Candidate& candidate) {
  return {candidate.config.tp, candidate.micro_batch_size, candidate.config.recompute, candidate.config.overlap};
}

bool better(const Estimate& a, const Estimate& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits) return a.step_seconds < b.step_seconds;
  return a.peak_bytes < b.peak_bytes;
}

AnalyticCoster::AnalyticCoster(const CostFacts& facts, const cluster::Cluster& cluster)
    : facts_(facts), comm_(cluster), gpus_per_node_(cluster.gpus_per_node) {}

double AnalyticCoster::collective(comm::Primitive kind, const std::vector<std::vector<int>>& groups,
                                  std::int64_t bytes) const {
  if (groups.empty() || groups.front().size() < 2 || bytes <= 0) return 0;
  comm::Step step{.primitive = kind, .groups = groups, .buffer_bytes = bytes,
                  .bytes_per_device = sent(kind, groups.front().size(), bytes)};
  return comm_.step_time(step);
}

// In buckets of kBucketBytes, each its own step (latency per bucket).
double AnalyticCoster::all_reduce(const std::vector<std::vector<int>>& groups, std::int64_t bytes) const {
  if (bytes <= 0) return 0;
  const std::int64_t buckets = (bytes + kBucketBytes - 1) / kBucketBytes;
  return static_cast<double>(buckets) * collective(comm::Primitive::all_reduce, groups, bytes / buckets);
}

double AnalyticCoster::zero_traffic(comm::Primitive kind, const std::vector<std::vector<int>>& groups,
                                    std::int64_t bytes, double tensors) const {
  return tensors * collective(kind, groups, static_cast<std::int64_t>(static_cast<double>(bytes) / tensors));
}

double AnalyticCoster::zero_latency(comm::Primitive kind, const std::vector<std::vector<int>>& groups,
                                    double tensors) const {
  return tensors * collective(kind, groups, 1);
}

double AnalyticCoster::p2p(const policy::ParallelConfig& c, std::int64_t bytes) const {
  if (c.pp < 2 || bytes <= 0) return 0;
  comm::Step step{.primitive = comm::Primitive::p2p};
  for (int d = 0; d < c.dp; ++d)
    for (int t = 0; t < c.tp; ++t)
      step.transfers.push_back({policy::device_of(c, 0, d, t), policy::device_of(c, 1, d, t), bytes});
  step.buffer_bytes = bytes * static_cast<std::int64_t>(step.transfers.size());
  step.bytes_per_device = bytes;
  return comm_.step_time(step);
}

Expected<AnalyticCoster::Unit> AnalyticCoster::unit_schedule(const policy::ParallelConfig& c, double backward,
                                                            double weight) {
  const auto key = std::make_tuple(static_cast<int>(c.schedule), c.pp, c.virtual_stages, c.micro_batches,
                                   std::lround(backward * 1000), std::lround(weight * 1000));
  if (const auto it = units_.find(key); it != units_.end()) return it->second;
  plan::Schedule schedule{.kind = c.virtual_stages > 1 ? plan::ScheduleKind::interleaved_one_f_one_b : c.schedule,
                          .chunks = c.virtual_stages};
  LOOM_ASSIGN_OR_RETURN(const auto blocks, plan::schedule_blocks(schedule, c.pp, c.micro_batches));
  const bool splits = plan::splits_backward(c.schedule);
  const plan::BlockCosts costs{.forward = 1.0 / c.virtual_stages,
                               .backward = (splits ? backward - weight : backward) / c.virtual_stages,
                               .weight = splits ? weight : 0.0};
  LOOM_ASSIGN_OR_RETURN(const plan::ScheduleEvaluation eval,
                        plan::evaluate_schedule(blocks, c.pp * c.virtual_stages, c.micro_batches, costs));
  Unit unit{.makespan = eval.makespan, .peak_held = eval.peak_held};
  units_.emplace(key, unit);
  return unit;
}

Expected<Estimate> AnalyticCoster::price(const Candidate& candidate) {
  const policy::ParallelConfig& c = candidate.config;
  const auto cls = facts_.classes.find(class_of(candidate));
  const auto st = facts_.state.find(c.tp);
  if (cls == facts_.classes.end() || st == facts_.state.end())
    return fail(fmt::format("no measured facts for {}", describe(candidate)),
                "measure the class (tp, micro-batch size, recompute, overlap) before pricing it");
  const ClassFacts& f = cls->second;
  const StageState& s = st->second;
  Estimate e;
  const double per_stage = static_cast<double>(std::max(facts_.layers, 1)) / c.pp;
  const double t_p2p = p2p(c, f.boundary_bytes);

  // Per micro-batch on the slowest stage (the first holds the embeddings, the last the head).
  const auto stage_cost = [&](bool first, bool last) {
    PassSeconds out{.forward = per_stage * f.layer.forward, .backward = per_stage * f.layer.backward};
    if (first) out.forward += f.first.forward, out.backward += f.first.backward;
    if (last) out.forward += f.last.forward, out.backward += f.last.backward;
    return out;
  };
  PassSeconds slowest = stage_cost(true, c.pp == 1);
  if (c.pp > 1) {
    const PassSeconds last = stage_cost(false, true);
    slowest.forward = std::max(slowest.forward, last.forward) + t_p2p;
    slowest.backward = std::max(slowest.backward, last.backward) + t_p2p;
  }
  std::vector<int> peak_held{1};
  if (c.pp == 1) {
    e.pipeline_seconds = c.micro_batches * (slowest.forward + slowest.backward);
  } else {
    const double f0 = std::max(slowest.forward, 1e-12);
    LOOM_ASSIGN_OR_RETURN(const Unit unit, unit_schedule(c, slowest.backward / f0,
                                                         facts_.w_fraction * slowest.backward / f0));
    e.pipeline_seconds = unit.makespan * f0;
    peak_held = unit.peak_held;
  }

  // Model state of the worst stage (unsharded, for the dp traffic), and as ZeRO leaves it.
  const auto stage_state = [&](bool first, bool last, int zero) {
    StateBytes out = zero_state(s.layer, zero, c.dp, per_stage);
    if (first) out = plus(out, zero_state(s.first, zero, c.dp, 1));
    if (last) out = plus(out, zero_state(s.last, zero, c.dp, 1));
    return out;
  };
  const bool last_heavier = c.pp > 1 && stage_state(false, true, 0).total() > stage_state(true, false, 0).total();
  const StateBytes state = stage_state(!last_heavier, c.pp == 1 || last_heavier, 0);
  StateBytes held_state = stage_state(!last_heavier, c.pp == 1 || last_heavier, c.zero);
  if (c.zero >= 3) held_state.parameter += s.layer.bytes.parameter;  // one layer gathered whole
  const std::vector<std::vector<int>> groups = dp_groups(c);
  const PassSeconds per_mb = slowest;
  // ZeRO moves each parameter (its gradient) by a collective of its own: `tensors` of them on the stage.
  const double tensors = std::max(1.0, per_stage * s.layer.tensors + s.first.tensors + (c.pp == 1 ? s.last.tensors : 0));
  const double optimizer = per_stage * f.optimizer_layer + f.optimizer_rest;
  e.optimizer_seconds = c.zero > 0 ? optimizer / c.dp : optimizer;
  if (c.dp > 1) {
    switch (c.zero) {
      case 0: {
        const double sync = all_reduce(groups, state.gradient);
        const double bucket = all_reduce(groups, std::min(state.gradient, kBucketBytes));
        e.sync_seconds = std::max(bucket, sync - per_mb.backward);
        break;
      }
      case 1:
        e.sync_seconds = zero_traffic(comm::Primitive::reduce_scatter, groups, state.gradient, tensors) +
                         zero_traffic(comm::Primitive::all_gather, groups, state.parameter, tensors);
        break;
      case 2:
        // Each micro-batch's reduce-scatters are blocking collectives in the backward (no exec pass starts
        // them early: exec/passes.h prefetches ZeRO-3's gathers and buckets all-reduces only), so all of
        // them are exposed: llama3-8b over dp 64, 8 micro-batches, was priced 0.134 s hidden behind the
        // backward against the simulator's 1.336 s.
        e.sync_seconds = c.micro_batches * zero_traffic(comm::Primitive::reduce_scatter, groups, state.gradient, tensors) +
                         zero_traffic(comm::Primitive::all_gather, groups, state.parameter, tensors);
        break;
      default: {
        const double per_micro_batch = 2 * zero_traffic(comm::Primitive::all_gather, groups, state.parameter, tensors) +
                                       zero_traffic(comm::Primitive::reduce_scatter, groups, state.gradient, tensors);
        // Prefetching hides the bytes behind compute, not each collective's latency: a gather is issued one
        // reader ahead, and the reader before it is often shorter than a ring's launch and hops (the simulator
        // exposes ~0.25 s a micro-batch of them for llama3-8b over dp 64 on 8 nodes, ~0.012 s for gpt3-1.3b
        // over dp 8 in one node: the count of collectives times one's latency).
        const double latency = 2 * zero_latency(comm::Primitive::all_gather, groups, tensors) +
                               zero_latency(comm::Primitive::reduce_scatter, groups, tensors);
        const double first_gather =
            collective(comm::Primitive::all_gather, groups, s.layer.bytes.parameter / std::max(1.0, s.layer.tensors));
        e.sync_seconds = first_gather + c.micro_batches * std::max(latency, per_micro_batch - per_mb.forward -
                                                                                per_mb.backward);
        break;
      }
    }
  }
  e.step_seconds = e.pipeline_seconds + e.sync_seconds + e.optimizer_seconds;

  // Memory: state (sharded by ZeRO), held activations of the chunks in flight, the slice's workspace.
  const int chunks_in_flight = *std::ranges::max_element(peak_held);
  const double layers_per_chunk = per_stage / c.virtual_stages;
  const double held = layers_per_chunk * static_cast<double>(f.held_layer) * chunks_in_flight +
                      static_cast<double>(std::max(f.held_first, c.pp == 1 ? f.held_first + f.held_last : f.held_last)) *
                          (c.pp == 1 ? 1 : std::min(chunks_in_flight, c.micro_batches));
  e.peak_bytes = held_state.total() + static_cast<std::int64_t>(held) + f.workspace;
  e.fits = e.peak_bytes <= facts_.device_memory;
  e.explicit_sub_ops = static_cast<std::int64_t>(policy::explicit_sub_ops(facts_.forward_ops, c, c.micro_batches));
  // The job pipeline's own estimate (policy/plan_size.h): a finalist it would refuse is not plannable. A
  // megatron slice is one replica's; a ZeRO slice keeps its dp replicas, so it is cheap where they are few.
  e.folds = foldable(candidate, facts_.preset, gpus_per_node_);
  // The micro-batches planned one by one: one where it folds (ZeRO's slice keeps its replicas), all otherwise.
  e.plannable = (e.folds && c.zero == 0) ||
                policy::explicit_plan_bytes(facts_.forward_ops, c, e.folds ? 1 : c.micro_batches) <=
                    policy::explicit_plan_bytes_limit();
  e.cheap = e.folds || e.explicit_sub_ops <= policy::kFoldAboveSubOps;
  return e;
}

}  // namespace loom::search
