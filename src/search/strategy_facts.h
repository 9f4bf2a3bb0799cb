// Private to the strategy graph (strategy_graph.h): what each forward op does under each of its
// strategies, read off plans the primitives made (apply_sharding.h), so the costs describe the very
// sub-ops that apply_sharding later builds.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loom/cluster/gpu.h"
#include "loom/cluster/cluster.h"
#include "loom/comm/cost_model.h"
#include "loom/comm/layout.h"
#include "loom/comm/search.h"
#include "loom/cost/profile_db.h"
#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"
#include "loom/plan/sub_tensor.h"
#include "loom/search/apply_sharding.h"

namespace loom::search::detail {

using MaybeLayout = std::optional<comm::Layout>;

// One op under one strategy. Layouts are over the mesh's devices 0 .. n-1 (device k holds part k).
struct StrategyFacts {
  bool valid = false;            // trans accepted it and every tensor's pieces form an RVD layout
  double compute_seconds = 0;    // device 0's forward part, its backward part, and its parameters' optimizer steps
  std::vector<MaybeLayout> inputs;         // by forward input; nullopt for shape-only inputs
  std::vector<MaybeLayout> outputs;        // by forward output
  std::vector<MaybeLayout> input_grads;    // the gradient each input receives from the backward part; nullopt: none
  std::vector<MaybeLayout> output_grads;   // the gradient of each output the backward part reads; nullopt: none
  // By forward input, for the parameters this op reads first: how its optimizer step keeps the parameter
  // (and its gradient and states); nullopt for the other inputs.
  std::vector<MaybeLayout> kept_parameters;
  std::int64_t state_bytes = 0;       // on device 0: those parameters, their gradients and optimizer states
  std::int64_t activation_bytes = 0;  // on device 0: the op's forward outputs and the inputs its backward saves
};

struct OpFacts {
  std::vector<OpStrategy> candidates;  // every split of a non-frozen identifier (per axis), and replication
  std::vector<StrategyFacts> facts;    // by candidate
};

// By OpId (empty for ops outside the forward pass). Each candidate index is tried in its own copy of the
// fresh plan (plan::make_plan's), every forward op at once (trans changes only the op it transforms), so
// the plan is copied as many times as an op has candidates at most. Errors: the compute model's.
Expected<std::vector<OpFacts>> gather_facts(const plan::Plan& fresh, const ir::OpCatalog& catalog,
                                            const DeviceMesh& mesh, const cluster::GpuSpec& gpu,
                                            const cost::ProfileDb* profile);

// The RVD layout of pieces of a tensor of `shape` held by devices 0 .. n-1 (pieces[k] on device k):
// along each dimension even contiguous chunks, one value-part count, every (chunk, value part) held by
// the same number of devices (replicas ordered by device). nullopt when they are not one.
MaybeLayout layout_of_pieces(std::span<const plan::SubTensor> pieces, const ir::Shape& shape);

}  // namespace loom::search::detail

namespace loom::search::detail {

// The cost of one op pair for every pair of their candidates, row-major (from's candidate first); a pair
// with an invalid candidate is 0 (never chosen).
struct OpEdge {
  ir::OpId from;
  ir::OpId to;
  std::vector<double> seconds;
};

struct OpCosts {
  std::vector<std::vector<double>> node_seconds;  // by OpId, by candidate (strategy_graph.h's node cost)
  std::vector<OpEdge> edges;                      // producer -> consumer, in the consumers' program order
};

// Prices every op and op pair (strategy_graph.h, "Costs"). Errors: a transition the comm library cannot
// search (naming the tensor).
Expected<OpCosts> price_ops(const plan::Plan& fresh, const std::vector<OpFacts>& facts,
                            const cluster::Cluster& cluster, const comm::CommCostModel& comm,
                            const comm::SearchOptions& options);

// Which node each forward op takes its choice from (strategy_graph.h, "Coarsening").
struct Coarsening {
  std::vector<ir::OpId> roots;                 // by node, in program order
  std::vector<int> node_of;                    // by OpId; -1 for ops outside the forward pass
  std::vector<std::vector<int>> candidate_of;  // by OpId, by node strategy: the op's candidate
  int after_layers = 0;                        // variables left by merging layers alone
};

Coarsening coarsen(const ir::Graph& graph, const ir::OpCatalog& catalog, const std::vector<OpFacts>& facts,
                   const OpCosts& costs, bool merge_layers, bool follow_chains);

}  // namespace loom::search::detail
