// Analytic costing of a Candidate (plan_space.h): a step time and a peak memory per device from facts
// of the job measured once, without materializing the candidate (DESIGN.md, "Search": "prices them with
// the same path or a cheaper model checked against it"; bench/bench_auto_rank.cc reports how its ranking
// agrees with the full path). The facts are plain data; api/search_facts.h measures them on the engine's
// own path (one-layer slices planned and simulated in full).
//
// A device of pipeline stage s holds L_s = L / pp layers (the first stage also the ops before the
// layers, the last those after). Per micro-batch (seconds on that device, tp collectives included):
//     F_s = L_s · F_layer (+ F_first | F_last) + t_p2p,   B_s likewise (recomputation inside B),
// where t_p2p sends one boundary activation to the next stage (α-β p2p, all stages at once). The
// pipeline runs the candidate's schedule template (plan::schedule_blocks, interleaved: per chunk F/v,
// B/v; ZB-H1: B split into B - W and W = w_fraction · B) on the slowest stage's costs, evaluated by
// plan::evaluate_schedule (makespan and the micro-batch chunks held at once); without a pipeline,
// m · (F + B). Then the step adds
//   optimizer   L_s · opt_layer + opt_rest, divided by dp under ZeRO (each rank updates its shard);
//   dp sync     ZeRO 0: the gradient all-reduce over the dp ranks in 25 MiB buckets, overlapped with the
//               last micro-batch's backward (exposed: what exceeds it, at least one bucket); ZeRO 1: a
//               reduce-scatter and the parameters' all-gather at the step's end; ZeRO 2: a reduce-scatter
//               per micro-batch, blocking in its backward (exposed), the all-gather at the end; ZeRO 3: per micro-batch the
//               parameters gathered for forward and backward and the gradients reduce-scattered,
//               prefetched behind compute (exposed: what exceeds it, and at least every collective's
//               latency, which a prefetch one reader ahead does not hide). ZeRO's collectives are one per
//               parameter tensor, each paying the launch latency and α.
// Memory on the worst stage: parameters P, gradients G, optimizer states O of its layers (ZeRO 1: O/dp;
// 2: also G/dp; 3: also P/dp plus one layer gathered whole; "/dp" for the parameters dp divides, the
// others whole: SegmentState::zero_fraction), plus the activations held: L_s · held_layer
// (+ held_first | held_last) per micro-batch chunk times the chunks in flight (the schedule's peak; 1
// without a pipeline), plus the slice's transient workspace (its peak less its state and held bytes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/comm/cost_model.h"
#include "loom/search/plan_space.h"

namespace loom::search {

struct PassSeconds {
  double forward = 0;
  double backward = 0;  // recomputation included
};

// Model state on one device at a tp degree, without ZeRO.
struct StateBytes {
  std::int64_t parameter = 0;
  std::int64_t gradient = 0;
  std::int64_t optimizer = 0;
  std::int64_t total() const { return parameter + gradient + optimizer; }
};

// One (tp, micro-batch size, recompute, overlap) class, measured on a slice (one layer, dp 1, pp 1, one
// micro-batch of that size on tp devices), sequence parallelism as the space gives that tp. An overlapped
// class's slice runs Oases' two sub-batches, so the communication the overlap hides is measured, not modelled.
struct ClassFacts {
  PassSeconds layer;  // one transformer layer, per micro-batch
  PassSeconds first;  // the ops before the first layer (embeddings)
  PassSeconds last;   // the ops after the last layer (final norm, head, loss)
  double optimizer_layer = 0;  // one layer's optimizer steps (the tp shard of its parameters)
  double optimizer_rest = 0;   // the other ops' optimizer steps
  std::int64_t held_layer = 0;  // activation bytes one micro-batch keeps per layer from forward to backward
  std::int64_t held_first = 0;
  std::int64_t held_last = 0;
  std::int64_t workspace = 0;   // the slice's transient peak above its state and held activations
  std::int64_t boundary_bytes = 0;  // one micro-batch's activation crossing a stage boundary (per device)
};

struct ClassKey {
  int tp = 1;
  std::int64_t micro_batch_size = 1;
  policy::Recompute recompute = policy::Recompute::none;
  policy::Overlap overlap = policy::Overlap::none;
  auto operator<=>(const ClassKey&) const = default;
};
ClassKey class_of(const Candidate& candidate);

// The model state of one segment (one layer, the ops before the layers, those after) on one device,
// and the local shapes of its parameters there: ZeRO splits a parameter dp ways along the first dimension
// of its shard that dp divides and keeps it whole on every rank when none does (policy/zero.h), so what
// ZeRO saves depends on dp (GPT-3 13B's d_model 5140 divides by 4, not by 8).
struct SegmentState {
  StateBytes bytes;
  std::vector<std::vector<std::int64_t>> shapes;  // the parameters' local shapes (by bytes, state follows numel)
  double tensors = 0;  // parameter tensors of one copy of the segment (one layer's)
  // The fraction of the state left on a rank when what shards is split dp ways.
  double zero_fraction(int dp) const;
};

struct StageState {
  SegmentState layer;  // one layer
  SegmentState first;
  SegmentState last;
};

// Everything the pricing reads.
struct CostFacts {
  int layers = 1;           // transformer layers of the model (the slice holds one)
  int forward_ops = 0;      // of the whole model (the explicit plan's size estimate)
  bool preset = true;       // a model built here: a preset, an --arch family or a model file (a graph file cannot be folded)
  std::int64_t device_memory = 0;
  std::map<ClassKey, ClassFacts> classes;
  std::map<int, StageState> state;  // by tp
  double w_fraction = 0.5;  // of a backward, the weight-gradient part (ZB-H1's W)
};

struct Estimate {
  double step_seconds = 0;
  double pipeline_seconds = 0;  // forward and backward of every micro-batch, bubble included
  double sync_seconds = 0;      // exposed dp / ZeRO communication
  double optimizer_seconds = 0;
  std::int64_t peak_bytes = 0;
  bool fits = true;             // peak_bytes within the device's memory
  bool plannable = true;        // the full path would plan it (folds, or under policy/plan_size.h's limit)
  std::int64_t explicit_sub_ops = 0;  // the full path's size estimate (policy/plan_size.h: 3 x forward ops x dp x tp x m)
  // Cheap to plan in full: it folds, or its explicit plan is under plan_size.h's fold threshold (larger explicit
  // plans take tens of seconds to minutes).
  bool cheap = true;
  // The job pipeline can fold it (api/job_load.cc: megatron over replicas and micro-batches, ZeRO over
  // micro-batches within one node, on a model preset, without a zero-bubble schedule), so the search
  // plans it folded.
  bool folds = false;
};

// Prices candidates; caches schedule evaluations (a template's makespan scales with uniform costs).
class AnalyticCoster {
 public:
  AnalyticCoster(const CostFacts& facts, const cluster::Cluster& cluster);
  // Errors: a candidate whose class or tp degree has no facts, a schedule the template refuses.
  Expected<Estimate> price(const Candidate& candidate);

 private:
  struct Unit {
    double makespan = 0;
    std::vector<int> peak_held;
  };
  Expected<Unit> unit_schedule(const policy::ParallelConfig& config, double backward, double weight);
  double all_reduce(const std::vector<std::vector<int>>& groups, std::int64_t bytes) const;
  double collective(comm::Primitive kind, const std::vector<std::vector<int>>& groups, std::int64_t bytes) const;
  double p2p(const policy::ParallelConfig& config, std::int64_t bytes) const;
  // `tensors` collectives of `kind` moving `bytes` together (ZeRO's one per parameter or gradient).
  double zero_traffic(comm::Primitive kind, const std::vector<std::vector<int>>& groups, std::int64_t bytes,
                      double tensors) const;
  // The latency of those collectives alone (each moving one byte): what prefetching cannot hide.
  double zero_latency(comm::Primitive kind, const std::vector<std::vector<int>>& groups, double tensors) const;

  const CostFacts& facts_;
  comm::AlphaBetaCostModel comm_;
  int gpus_per_node_ = 1;
  std::map<std::tuple<int, int, int, int, long, long>, Unit> units_;
};

// The better of two estimates: fits where the other does not, else faster (fitting), else smaller.
bool better(const Estimate& a, const Estimate& b);

}  // namespace loom::search
