// Built-in parallelization policies, written with the public primitives (trans / assign / order) and the
// plan helpers (batch identifiers, micro-batches, stages, schedule templates) alone, as a user would
// write them (DESIGN.md, "Primitives"). Each is Megatron-LM's 3-D parallelism (Narayanan et al. 2021)
// restricted to some of its degrees:
//   dp        data parallelism: the batch split dp ways, optimizer steps replicated per device;
//   tp        tensor parallelism (Shoeybi et al. 2019): column- / row-parallel pairs, heads split;
//   dp-tp     both, the batch split first and tensor parallelism inside each data-parallel part;
//   pp        pipeline parallelism: pp stages of balanced FLOPs, micro-batches, GPipe or 1F1B;
//   megatron  any dp x tp x pp, with ZeRO over its dp ranks when `zero` is set, and coshard when
//             `coshard` is (policy/coshard.h);
//   coshard   megatron with coshard on, by default nnScaler's Swin plan (4 parts on the first quarter
//             of the layers, attention and MLP);
//   interlaced  megatron with the embedding and tied LM head spread over all pp x tp devices of a
//             replica, their work interleaved with the 1F1B stages (nnScaler's T5 plan, policy/interlaced.h);
//   zero      data parallelism with ZeRO stage 1, 2 or 3 (policy/zero.h): optimizer states, then
//             gradients, then parameters partitioned over the dp ranks.
// Devices are numbered as Megatron does: tp innermost, then dp, then pp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"
#include "loom/plan/schedule.h"
#include "loom/policy/coshard.h"
#include "loom/policy/overlap.h"
#include "loom/policy/recompute_policy.h"

namespace loom::policy {

// What a forward op holds on one device of a plan at the job's tp degree and recomputation, in bytes (the
// job fills it from the materialized one-stage plan that op_seconds comes from, api/stage_costs.h).
// The interlaced order bounds the micro-batches each stage holds by it (policy/interlaced.h).
struct OpBytes {
  std::vector<std::int64_t> held;   // by OpId: one micro-batch's activations kept from its forward to its backward
  std::vector<std::int64_t> state;  // by OpId: its parameters' weights, gradients and optimizer states
  // By OpId: the activation bytes its forward writes for one micro-batch, held or freed: what a layer's
  // recomputation writes again while its backward runs (empty: no transient reserved).
  std::vector<std::int64_t> working;
  std::int64_t device = 0;          // one device's memory

  bool operator==(const OpBytes&) const = default;
};

struct ParallelConfig {
  int dp = 1;             // data-parallel degree
  int tp = 1;             // tensor-parallel degree
  int pp = 1;             // pipeline stages
  int micro_batches = 1;  // micro-batches per step (pipelined when pp > 1, else accumulated)
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;  // pp > 1 only
  // Model chunks per pipeline device (Megatron's virtual pipeline, Narayanan et al. 2021): above 1, the
  // stages are pp x virtual_stages chunks of whole layers, chunk c of device s holding stage c * pp + s,
  // run by the interleaved 1F1B schedule (micro_batches a multiple of pp).
  int virtual_stages = 1;
  // How each pipeline block follows the block before it on its device (plan/schedule.h): strict, Megatron-LM's
  // one block at a time, or hoist (a block's sub-ops that do not wait for its first may start inside the block
  // before). Policies megatron, coshard and pp; pp > 1 or micro-batches above 1.
  plan::BlockOrder block_order = plan::BlockOrder::strict;
  // Sequence parallelism (Korthikanti et al. 2022; tp > 1): the ops tensor parallelism replicates
  // (norms, dropouts, residual adds) split along the sequence over the tp ranks instead.
  bool sequence_parallel = false;
  // ZeRO stage over the dp ranks (policy/zero.h): 0 off; 1 optimizer states, 2 also gradients, 3 also
  // parameters partitioned. Policies 'zero' (which requires 1 to 3) and 'megatron'.
  int zero = 0;
  // ZeRO's shard order over nodes (policy/zero.h): the dp ranks of one tp rank that share a node, when
  // they are consecutive and several nodes hold dp (the job sets it from the cluster). Shard l x nodes + n
  // then goes to rank n x zero_node_ranks + l, so a reduce-scatter within each node followed by one among
  // the nodes' peers lands every shard on its owner, with nothing sent between nodes. 1: shard r on rank
  // r; 0: the job sets it (api::apply_policy), a policy applied directly takes it as 1.
  int zero_node_ranks = 0;
  // Activation recomputation (policy/recompute_policy.h): none, selective, full or memory-bound.
  Recompute recompute = Recompute::none;
  // Coshard (policy/coshard.h; policies 'megatron' and 'coshard'): the chosen tensor-parallel regions
  // split C x tp ways, C parts run one after another on each tp rank and recomputed.
  CoshardConfig coshard;
  // Oases' overlapped tensor parallelism (policy/overlap.h; tp > 1; pipelines with 1F1B or GPipe): the
  // tensor-parallel blocks run as 2 sub-batches whose collectives overlap each other's compute.
  Overlap overlap = Overlap::none;
  // nnScaler's interlaced pipeline (policy/interlaced.h; policy 'interlaced'): the embedding table's
  // lookups and the tied LM head spread over all pp x tp devices of a replica, interleaved with 1F1B.
  bool interlaced = false;
  // Per-layer tensor-parallel degrees (policy/layer_degrees.h; policy 'megatron'), by layer ordinal:
  // each divides tp, a layer at degree t running tp / t data-parallel copies inside its tp group; the
  // ops outside the layers stay at tp. Empty: every layer at tp.
  std::vector<int> layer_tp;
  // By OpId: the predicted seconds of each forward op at this tp degree, its forward, backward and
  // recomputation (the job fills it from the compute model, api/stage_costs.h). megatron_stages balances
  // pipeline stages of whole layers by it; empty: by training FLOPs.
  std::vector<double> op_seconds;
  // The bytes each forward op holds (the job fills it for the interlaced policy); empty: the interlaced
  // order caps each stage at 1F1B's peak count of held micro-batches.
  OpBytes op_bytes;
};

// dp * tp * pp.
int device_count(const ParallelConfig& config);

// The degrees a policy takes on `devices` devices when the user gives none: 'tp' and 'pp' put every device
// on their one degree; 'dp-tp' tp 2 and dp the rest (an even count of at least 4); 'megatron' the largest
// tp up to 8 that divides the count (one node's NVLink domain) and dp the rest; 'interlaced' pp 4 (or
// the most up to 4 that divides the count) and tp the rest; the others dp. The job's
// default degrees (api/resolve_request.h, which also resolves the micro-batches).
Expected<ParallelConfig> default_degrees(std::string_view policy, int devices);
// (pp_rank * dp + dp_rank) * tp + tp_rank.
int device_of(const ParallelConfig& config, int pp_rank, int dp_rank, int tp_rank);

// What a policy chose beyond its config, for the job's description: the interlaced order picked
// ("interlaced order: H in groups of 4, warm-up +3, ..."); empty when nothing was.
struct PolicyNotes {
  std::string schedule;
};

struct PolicyInfo {
  std::string_view name;     // "dp-tp"
  std::string_view degrees;  // the ParallelConfig fields it uses: "dp, tp"
  std::string_view summary;  // one line for `--help`
};
std::span<const PolicyInfo> known_policies();
std::string known_policy_names();  // "dp, tp, dp-tp, pp, megatron, zero"

// Applies the named policy to a fresh plan (plan::make_plan: one unassigned part per op). Errors: an
// unknown name (listing the known ones), a degree the policy does not use set above 1, degrees below 1,
// and whatever megatron() reports (oases_megatron() when config.overlap is oases).
// `catalog`: the job's ops (the built-ins, plus a traced graph's custom ops), for FLOPs and op classes.
// `notes`, when given, gets what the policy chose beyond the config.
Expected<void> apply_policy(plan::Plan& plan, std::string_view policy, const ParallelConfig& config,
                            const ir::OpCatalog& catalog = ops::builtin_ops(), PolicyNotes* notes = nullptr);

// dp x tp x pp over a fresh plan. Per forward op, in this order (trans refuses to divide the value of a
// piece a sibling also produces, so the value-dividing splits come last):
//  1. pp > 1 or micro_batches > 1: the batch split into micro-batches (plan::split_micro_batches);
//  2. dp > 1: each piece split dp ways along its batch identifier; ops that see no batch (position
//     tables, relative-position biases) replicated dp times;
//  3. tp > 1: each data-parallel part split as tensor_parallel_layout() says, or replicated tp times;
//  4. the parts placed on device_of(stage, dp rank, tp rank), the stage from megatron_stages().
// Optimizer steps go to their parameter's stage, replicated over dp (with `zero`, split over dp as
// place_zero_step says) and split over tp along the parameter's tensor-parallel dimension; gradient
// accumulations and the loss-gradient seed follow the tensor they belong to, an accumulation of a
// parameter's partial sums split by value over the micro-batches and dp ranks (summed in place, then
// reduced once). With pp > 1 each (dp rank, tp rank) pipeline gets the schedule's order edges.
// With coshard (parts above 1), each tp part of a chosen region's ops is split coshard.parts ways more
// along the same identifier on the same device, the parts' chains ordered and recomputed (coshard.h).
// Errors name the op and the dimension: a batch not divisible by dp x micro_batches, heads (or another
// split dimension) not divisible by tp (or tp x coshard parts), fewer balanced stages than pp, or a plan
// already transformed; and what coshard_plan reports. With layer_tp, each layer's ops split over its own
// degree t inside the tp group (batch tp / t ways more, then t ways), degrees that do not divide tp or
// runs that miss the layers refused (check_layer_degrees), as are sequence parallelism, ZeRO, coshard and
// the interlaced pipeline beside them. `notes`, when given, gets the interlaced order chosen.
Expected<void> megatron(plan::Plan& plan, const ParallelConfig& config,
                        const ir::OpCatalog& catalog = ops::builtin_ops(), PolicyNotes* notes = nullptr);

// By OpId: the stage (chunk * pp + pipeline rank) megatron() gives each forward op, -1 for the others:
// pp x virtual_stages chunks of equal layer counts when interleaved; else pp stages of whole layers, equal
// counts where the layers cost the same and divide, otherwise balanced_layer_stages by config.op_seconds
// (training FLOPs when empty); pp stages of balanced FLOPs cut inside layers when there are fewer layers
// than stages or none.
Expected<std::vector<int>> megatron_stages(const plan::Plan& plan, const ParallelConfig& config,
                                           const ir::OpCatalog& catalog = ops::builtin_ops());

}  // namespace loom::policy
