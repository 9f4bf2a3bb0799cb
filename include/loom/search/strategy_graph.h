// The strategy graph (DESIGN.md "Search", intra-stage sharding): a stage's forward ops on a device mesh as
// a ShardingProblem (sharding_problem.h), for the solvers behind that plain-data boundary.
//
// Strategies. Per forward op, on each mesh axis: split one identifier of its annotation (a plain one cuts
// the tensors holding it; a '+' one leaves partial sums), or replicate (Megatron's: every replica
// computes the whole gradients). Only the splits trans accepts are kept (sizes the axis divides, no
// frozen identifier, no later atom of a merged dimension). Backward and optimizer ops follow the forward
// choice (apply_sharding.h), so their costs are folded into the forward op's.
//
// Costs, in integer nanoseconds of one training step on one device (the mesh runs in lockstep):
//   node  the compute model's time (cost/compute_model.h) of device 0's forward part and backward part,
//         plus the optimizer steps of the parameters the op reads first, plus moving each such parameter's
//         gradient from how the backward parts leave it to how its optimizer step keeps the parameter
//         (data parallelism's all-reduce when the batch is split and the weight replicated), and the
//         parameter from that layout to how the op reads it;
//   edge  per tensor from producer to consumer: the comm library's transition search (comm/search.h,
//         α-β) from the layout the producer writes to the layout the consumer reads, plus, mirrored, from
//         the layout of the gradient the consumer's backward writes to the layout the producer's backward
//         reads. A parameter read by a second op (a tied embedding) is an edge from its first reader,
//         whose choice places it. A tensor read by several ops pays each edge on its own (the sum of the
//         partial gradients is not priced).
// Every layout is read off the sub-ops trans makes (RVD over devices 0 .. n-1), so the problem prices
// exactly the plan apply_choice builds.
//
// Usage, in bytes on device 0: the state of the parameters an op reads first (parameter, gradient and
// optimizer states at the job's precision), the op's forward outputs, and the activation pieces it reads
// when its backward saves its inputs (a piece gathered for a replicated op is a copy the producer's
// output does not account for). Interval proxy: every forward op's usage is live from its position in
// the forward program order to the end of the forward pass (time = number of forward ops), where a
// step's memory peaks: states live throughout, activations as if all were held for the backward pass.
// An upper bound of the peak at the forward/backward boundary (outputs freed early and pieces the
// producer and consumer share count twice: 1.2-1.7x the simulated peak on a GPT layer,
// tests/search/strategy_rank_test.cc), which leaves out only the transient gradients of the backward
// pass.
//
// Coarsening (Rhino), each optional:
//   merge_layers  layers (policy::layer_of names) with the same structure — op types, annotations, shapes
//                 and their wiring — share one set of variables: the problem holds the first such layer's
//                 nodes with every layer's costs added in;
//   follow_chains an elementwise or data-movement op with a single activation input takes its producer's
//                 node: for each of the producer's strategies, the op's own strategy that is cheapest
//                 after it, its own cost plus the moves from the producer (ties: the lower own cost, then
//                 the first); the one matching the producer's layout when there is one, as an elementwise
//                 op moves the same bytes before or after it.
// Node numbering follows the forward program order of each node's first op; names are that op's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/comm/cost_model.h"
#include "loom/comm/search.h"
#include "loom/core/error.h"
#include "loom/cost/profile_db.h"
#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"
#include "loom/search/apply_sharding.h"
#include "loom/search/sharding_problem.h"

namespace loom::search {

struct StrategyGraphOptions {
  bool merge_layers = true;                // identical layers share one set of variables
  bool follow_chains = true;               // forced elementwise / data-movement ops join their producer
  std::int64_t usage_limit = kForbidden;   // bytes per device; kForbidden: no limit
  comm::SearchOptions search;              // bounds each transition search
};

// What the solver's variables stand for.
struct StrategyNode {
  std::string name;                     // the first op's name
  std::vector<OpStrategy> strategies;   // the first op's, aligned with the problem node's costs
  std::vector<ir::OpId> ops;            // every forward op taking its choice from this node, program order
};

struct CoarseningStats {
  int forward_ops = 0;     // nodes without coarsening
  int after_layers = 0;    // after merging identical layers
  int nodes = 0;           // after following chains too
  int edges = 0;           // edges of the problem (op pairs within a node are folded into its costs)
};

struct StrategyGraph {
  DeviceMesh mesh;
  ShardingProblem problem;
  std::vector<StrategyNode> nodes;  // by problem node
  // By OpId, for forward ops: the node whose choice the op takes, and per strategy of that node the op's
  // own strategy (-1 and empty for the other ops).
  std::vector<int> node_of_op;
  std::vector<std::vector<OpStrategy>> op_strategies;
  CoarseningStats stats;
};

// Builds the problem of `graph`'s forward ops (a training graph: forward, backward, optimizer) on `mesh`,
// devices 0 .. n-1 of `cluster` (`comm` prices their moves; `profile`, optional, overrides the roofline).
// Errors: a mesh check_mesh refuses or larger than the cluster, a graph make_plan or the compute model
// refuses, a transition the comm library cannot search.
Expected<StrategyGraph> build_strategy_graph(const ir::Graph& graph, const ir::OpCatalog& catalog,
                                             const cluster::Cluster& cluster, const comm::CommCostModel& comm,
                                             const DeviceMesh& mesh, const StrategyGraphOptions& options = {},
                                             const cost::ProfileDb* profile = nullptr);

// By OpId, each op's strategy under `choice` (replication for ops outside the forward pass). Errors: a
// choice of the wrong length or a strategy out of range.
Expected<std::vector<OpStrategy>> op_strategies(const StrategyGraph& graph, const ShardingChoice& choice);

// The choice giving every node's first op the strategy `per_op` names for it (by OpId); errors name the
// node whose strategies do not include it.
Expected<ShardingChoice> choice_of(const StrategyGraph& graph, std::span<const OpStrategy> per_op);

// The plan of `choice` (apply_sharding over op_strategies), ready for the job pipeline.
Expected<plan::Plan> apply_choice(const StrategyGraph& strategies, const ShardingChoice& choice,
                                  const ir::Graph& graph, const ir::OpCatalog& catalog);

}  // namespace loom::search
