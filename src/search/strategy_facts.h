// Private to the strategy graph (strategy_graph.h): what each forward op does under each of its
// strategies, read off plans the primitives made (apply_sharding.h), so the costs describe the very
// sub-ops that apply_sharding later builds.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
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

// Transition times by (shape, dtype, from, to), the layouts in canonical form (comm/layout.h): every layer
// moves the same tensors the same ways, and equal placements move nothing.
class Transitions {
 public:
  Transitions(const cluster::Cluster& cluster, const comm::CommCostModel& comm, const comm::SearchOptions& options)
      : cluster_(cluster), comm_(comm), options_(options) {}

  // Seconds to turn `from` into `to` (0 when either is absent: nothing moves). Errors: the search's,
  // naming the tensor.
  Expected<double> seconds(const ir::FullTensor& tensor, const MaybeLayout& from, const MaybeLayout& to);

 private:
  const cluster::Cluster& cluster_;
  const comm::CommCostModel& comm_;
  const comm::SearchOptions& options_;
  std::map<std::tuple<std::vector<std::int64_t>, ir::DType, comm::Layout, comm::Layout>, double> memo_;
};

// One tensor from its source op to a consumer op: output `source_index` of the source, or (a parameter
// read again, `kept_parameter`) the layout its first reader `source` keeps it in, that reader's input
// `source_index`; it is the consumer's input `input`.
struct OpEdge {
  ir::OpId from;
  ir::OpId to;
  std::size_t source_index = 0;
  bool kept_parameter = false;
  std::size_t input = 0;
};

// Prices ops and op pairs under candidates (strategy_graph.h, "Costs"). Pairs are priced when asked for:
// the coarsening needs only some of them, and each distinct move is one transition search.
class OpPricer {
 public:
  OpPricer(const plan::Plan& fresh, const std::vector<OpFacts>& facts, const cluster::Cluster& cluster,
           const comm::CommCostModel& comm, const comm::SearchOptions& options);

  // Every forward op under every candidate (0 for invalid ones). Errors: a transition search's.
  Expected<void> price_ops();
  const std::vector<std::vector<double>>& node_seconds() const { return node_seconds_; }  // by OpId, candidate
  // Producer -> consumer pairs, in the consumers' program order (found on construction).
  const std::vector<OpEdge>& edges() const { return edges_; }
  // The pair's forward move plus its mirrored gradient move, `from` under candidate a and `to` under b
  // (0 when either candidate is invalid: never chosen).
  Expected<double> edge_seconds(const OpEdge& edge, std::size_t a, std::size_t b);

 private:
  const plan::Plan& fresh_;
  const std::vector<OpFacts>& facts_;
  Transitions moves_;
  std::vector<std::vector<double>> node_seconds_;
  std::vector<OpEdge> edges_;
};

// Which node each forward op takes its choice from (strategy_graph.h, "Coarsening").
struct Coarsening {
  std::vector<ir::OpId> roots;                 // by node, in program order
  std::vector<int> node_of;                    // by OpId; -1 for ops outside the forward pass
  std::vector<std::vector<int>> candidate_of;  // by OpId, by node strategy: the op's candidate
  int after_layers = 0;                        // variables left by merging layers alone
};

// Errors: a transition search's.
Expected<Coarsening> coarsen(const ir::Graph& graph, const ir::OpCatalog& catalog, const std::vector<OpFacts>& facts,
                             OpPricer& pricer, bool merge_layers, bool follow_chains);

}  // namespace loom::search::detail
