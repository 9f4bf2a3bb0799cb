// Megatron-LM's dp x tp x pp (policy.h), composed from the primitives and the plan helpers.
#include <algorithm>

#include <fmt/format.h>

#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/primitives.h"
#include "loom/plan/schedule.h"
#include "loom/policy/policy.h"
#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"

namespace loom::policy {
namespace {

using plan::Plan;
using plan::SubOpId;
using plan::TransAlgo;

// trans, or the piece itself when n is 1 (a one-part split would only rename it).
Expected<std::vector<SubOpId>> split(Plan& plan, SubOpId piece, const TransAlgo& algo, int n) {
  if (n == 1) return std::vector<SubOpId>{piece};
  return plan::trans(plan, piece, algo, n);
}

// The batch dimension of every tensor (-1: none), derived as batch_identifiers derives the ops':
// dimension 0 of graph inputs, then each batch-carrying op's outputs where its batch identifier sits.
std::vector<int> tensor_batch_dims(const Plan& plan, const std::vector<std::optional<std::string>>& batch) {
  const ir::Graph& graph = *plan.graph;
  std::vector<int> dims(graph.tensors.size(), -1);
  for (ir::TensorId in : graph.inputs)
    if (graph.tensor(in).shape.rank() > 0) dims[in.index()] = 0;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || !batch[op.id.index()]) continue;
    const SubOpId any = plan.parts[op.id.index()].front();
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      for (std::size_t d = 0; d < graph.tensor(op.outputs[j]).shape.rank(); ++d)
        if (plan::dim_identifier(plan, any, true, j, d) == batch[op.id.index()]) {
          dims[op.outputs[j].index()] = static_cast<int>(d);
          break;
        }
  }
  return dims;
}

class Composer {
 public:
  Composer(Plan& plan, const ParallelConfig& config, TensorParallelLayout tensor_parallel, std::vector<int> stages)
      : plan_(plan),
        graph_(*plan.graph),
        c_(config),
        tp_layout_(std::move(tensor_parallel)),
        stage_(std::move(stages)),
        tensor_stage_(tensor_stages(graph_, stage_)),
        batch_(plan::batch_identifiers(plan)),
        batch_dims_(tensor_batch_dims(plan, batch_)),
        producers_(ir::producers(*plan.graph)),
        blocks_(static_cast<std::size_t>(device_count(config)),
                std::vector<std::vector<SubOpId>>(static_cast<std::size_t>(config.micro_batches))) {}

  Expected<void> run() {
    LOOM_RETURN_IF_ERROR(check_batch());
    LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<SubOpId>> pieces, micro_batches());
    for (const ir::Op& op : graph_.ops)
      if (op.pass == ir::Pass::forward) LOOM_RETURN_IF_ERROR(place_forward(op, pieces[op.id.index()]));
    for (const ir::Op& op : graph_.ops)
      if (op.pass != ir::Pass::forward && !op.is_mirror()) LOOM_RETURN_IF_ERROR(place_follower(op));
    return schedule();
  }

 private:
  int device(int stage, int r, int j) const { return device_of(c_, stage, r, j); }

  // The batch (dimension 0 of every input) must split into dp x micro_batches equal parts.
  Expected<void> check_batch() const {
    const int parts = c_.dp * c_.micro_batches;
    for (ir::TensorId in : graph_.inputs) {
      const ir::FullTensor& t = graph_.tensor(in);
      if (t.shape.rank() == 0 || t.shape[0] % parts == 0) continue;
      std::string reader;
      for (const ir::Op& op : graph_.ops)
        if (std::find(op.inputs.begin(), op.inputs.end(), in) != op.inputs.end()) {
          reader = fmt::format(", read by op '{}'", op.name);
          break;
        }
      return fail(fmt::format("batch {} of input '{}' {}{} is not divisible into dp {} x {} micro-batches", t.shape[0],
                              t.name, t.shape.to_string(), reader, c_.dp, c_.micro_batches),
                  "choose dp x micro_batches dividing the batch, or build the model with another batch");
    }
    return {};
  }

  // Per forward op, its micro-batch pieces (one piece for ops without a batch, or a single micro-batch).
  Expected<std::vector<std::vector<SubOpId>>> micro_batches() {
    std::vector<std::vector<SubOpId>> pieces(graph_.ops.size());
    std::vector<ir::OpId> batched;
    for (const ir::Op& op : graph_.ops) {
      if (op.pass != ir::Pass::forward) continue;
      pieces[op.id.index()] = {plan_.parts[op.id.index()].front()};
      if (batch_[op.id.index()]) batched.push_back(op.id);
    }
    if (c_.micro_batches == 1) return pieces;
    LOOM_ASSIGN_OR_RETURN(plan::MicroBatches mb, plan::split_micro_batches(plan_, batched, c_.micro_batches));
    for (std::size_t i = 0; i < mb.ops.size(); ++i) pieces[mb.ops[i].index()] = mb.parts[i];
    return pieces;
  }

  Expected<void> place_forward(const ir::Op& op, const std::vector<SubOpId>& pieces) {
    const int stage = stage_[op.id.index()];
    const auto& batch = batch_[op.id.index()];
    const TransAlgo data = batch ? TransAlgo{plan::SplitAlgo{*batch}} : TransAlgo{plan::ReplicateAlgo{}};
    const auto& tensor_split = tp_layout_.splits[op.id.index()];
    // Ops tensor parallelism does not split run on every tp rank and, as in Megatron, compute whole
    // gradients there (one all-reduce of their output gradient, none of their weights' gradients).
    const TransAlgo tensor = tensor_split ? TransAlgo{*tensor_split}
                                          : TransAlgo{plan::ReplicateAlgo{.redundant_backward = true}};
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts,
                            with_context(split(plan_, pieces[k], data, c_.dp), fmt::format("data parallelism {}", c_.dp)));
      for (int r = 0; r < c_.dp; ++r) {
        LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> tp_parts,
                              with_context(split(plan_, dp_parts[static_cast<std::size_t>(r)], tensor, c_.tp),
                                           fmt::format("tensor parallelism {}", c_.tp)));
        for (int j = 0; j < c_.tp; ++j) {
          const SubOpId part = tp_parts[static_cast<std::size_t>(j)];
          LOOM_RETURN_IF_ERROR(plan::assign(plan_, part, device(stage, r, j)));
          if (batch) blocks_[static_cast<std::size_t>(device(stage, r, j))][k].push_back(part);
        }
      }
    }
    return {};
  }

  // The stage of a tensor: a parameter's is its first forward reader's, an activation's its producer's.
  int stage_of(ir::TensorId t) const { return t.valid() ? tensor_stage_[t.index()] : 0; }

  static std::vector<int> tensor_stages(const ir::Graph& graph, const std::vector<int>& op_stage) {
    std::vector<int> stage(graph.tensors.size(), -1);
    for (const ir::Op& op : graph.ops) {
      if (op.pass != ir::Pass::forward) continue;
      for (const auto* list : {&op.inputs, &op.outputs})
        for (ir::TensorId t : *list)
          if (stage[t.index()] < 0) stage[t.index()] = op_stage[op.id.index()];
    }
    for (int& s : stage) s = std::max(s, 0);
    return stage;
  }

  // An op outside the forward pass that no forward op carries along: an optimizer step (owner: its
  // parameter), a gradient accumulation or the loss-gradient seed (owner: the tensor whose gradient it
  // writes). It runs on the owner's stage, in micro-batch and data-parallel pieces along the owner's
  // batch dimension (replicated over dp when it has none), then split over tp along the owner's
  // tensor-parallel dimension (replicated when it has none).
  Expected<void> place_follower(const ir::Op& op) {
    const ir::TensorId owner = op.pass == ir::Pass::optimizer ? op.inputs.front()
                               : op.outputs.empty()           ? ir::TensorId{}
                                                              : graph_.tensor(op.outputs.front()).owner;
    const int stage = stage_of(owner);
    const SubOpId whole = plan_.parts[op.id.index()].front();
    const auto identifier_at = [&](int dim) -> std::optional<std::string> {
      if (dim < 0) return std::nullopt;
      return plan::dim_identifier(plan_, whole, true, 0, static_cast<std::size_t>(dim));
    };
    const bool is_parameter = owner.valid() && graph_.tensor(owner).role == ir::TensorRole::parameter;
    const std::optional<std::string> batch = is_parameter || !owner.valid() ? std::nullopt
                                                                             : identifier_at(batch_dims_[owner.index()]);
    const std::optional<std::string> tensor = owner.valid() ? identifier_at(tp_layout_.tensor_dims[owner.index()])
                                                            : std::nullopt;
    const auto algo = [](const std::optional<std::string>& x) {
      return x ? TransAlgo{plan::SplitAlgo{*x}} : TransAlgo{plan::ReplicateAlgo{}};
    };
    const std::string context = fmt::format("placing '{}'", op.name);
    std::vector<SubOpId> pieces{whole};
    if (batch && c_.micro_batches > 1) {
      LOOM_ASSIGN_OR_RETURN(pieces, with_context(split(plan_, whole, algo(batch), c_.micro_batches), context));
    }
    for (SubOpId piece : pieces) {
      LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts, with_context(split(plan_, piece, algo(batch), c_.dp), context));
      for (int r = 0; r < c_.dp; ++r) {
        LOOM_ASSIGN_OR_RETURN(
            std::vector<SubOpId> tp_parts,
            with_context(split(plan_, dp_parts[static_cast<std::size_t>(r)], tensor_algo(op, tensor), c_.tp), context));
        for (int j = 0; j < c_.tp; ++j)
          LOOM_RETURN_IF_ERROR(plan::assign(plan_, tp_parts[static_cast<std::size_t>(j)], device(stage, r, j)));
      }
    }
    return {};
  }

  // How a follower splits over tp: along the owner's tensor-parallel dimension; else a gradient
  // accumulation that sums partial sums of column-parallel backwards (LLaMA's q, k, v and gate, up
  // projections) is split by value, so each rank adds its partial sums and one all-reduce follows
  // (Megatron fuses those projections into one GEMM for the same effect); else replicated.
  TransAlgo tensor_algo(const ir::Op& op, const std::optional<std::string>& tensor) const {
    if (tensor) return plan::SplitAlgo{*tensor};
    if (c_.tp > 1 && plan_.layouts[op.id.index()].linear && reads_partial_sums(op)) return plan::ValueSplitAlgo{};
    return plan::ReplicateAlgo{};
  }

  // Whether some producer part writes an input of `op` as a value part (a partial sum).
  bool reads_partial_sums(const ir::Op& op) const {
    for (ir::TensorId in : op.inputs) {
      const ir::OpId producer = producers_[in.index()];
      if (!producer.valid()) continue;
      for (SubOpId part : plan_.parts[producer.index()]) {
        const plan::SubOp& sub = plan_.sub_op(part);
        const auto& outputs = graph_.op(sub.op).outputs;
        for (std::size_t j = 0; j < outputs.size(); ++j)
          if (outputs[j] == in && !sub.outputs[j].value.is_whole()) return true;
      }
    }
    return false;
  }

  // One pipeline per (dp rank, tp rank): its stages' forward parts per micro-batch, ordered by the
  // schedule template.
  Expected<void> schedule() {
    if (c_.pp == 1) return {};
    for (int r = 0; r < c_.dp; ++r)
      for (int j = 0; j < c_.tp; ++j) {
        std::vector<std::vector<std::vector<SubOpId>>> stages;
        for (int s = 0; s < c_.pp; ++s) stages.push_back(blocks_[static_cast<std::size_t>(device(s, r, j))]);
        LOOM_RETURN_IF_ERROR(with_context(plan::apply_schedule(plan_, {c_.schedule}, stages),
                                          fmt::format("pipeline of dp rank {}, tp rank {}", r, j)));
      }
    return {};
  }

  Plan& plan_;
  const ir::Graph& graph_;
  const ParallelConfig& c_;
  TensorParallelLayout tp_layout_;
  std::vector<int> stage_;         // by OpId, forward ops
  std::vector<int> tensor_stage_;  // by TensorId
  std::vector<std::optional<std::string>> batch_;
  std::vector<int> batch_dims_;
  std::vector<ir::OpId> producers_;  // by TensorId: the op writing it
  std::vector<std::vector<std::vector<SubOpId>>> blocks_;  // [device][micro-batch]: forward parts, program order
};

Expected<void> check_fresh(const Plan& plan) {
  for (const ir::Op& op : plan.graph->ops) {
    const auto& parts = plan.parts[op.id.index()];
    if (parts.size() != 1 || plan.sub_op(parts.front()).device != plan::kUnassigned)
      return fail(fmt::format("op '{}' was already transformed or placed", op.name),
                  "apply a policy to a fresh plan (plan::make_plan)");
  }
  return {};
}

}  // namespace

Expected<void> megatron(Plan& plan, const ParallelConfig& config) {
  for (const auto& [name, value] : {std::pair{"dp", config.dp}, std::pair{"tp", config.tp}, std::pair{"pp", config.pp},
                                    std::pair{"micro_batches", config.micro_batches}})
    if (value < 1) return fail(fmt::format("{} is {}; it must be at least 1", name, value));
  // Bounds that keep the plan finite (every op gets micro_batches x dp x tp parts per stage).
  constexpr std::int64_t kMaxParts = std::int64_t{1} << 16;
  const std::int64_t devices = std::int64_t{config.dp} * config.tp * config.pp;
  if (devices > kMaxParts || std::int64_t{config.micro_batches} * config.dp * config.tp > kMaxParts)
    return fail(fmt::format("dp {} x tp {} x pp {} with {} micro-batches is over Loom's limit of {} devices or parts "
                            "per op",
                            config.dp, config.tp, config.pp, config.micro_batches, kMaxParts));
  LOOM_RETURN_IF_ERROR(check_fresh(plan));
  LOOM_ASSIGN_OR_RETURN(TensorParallelLayout tensor_parallel, tensor_parallel_layout(plan, config.tp));
  LOOM_ASSIGN_OR_RETURN(std::vector<int> stages, pipeline_stages(plan, config.pp));
  return Composer(plan, config, std::move(tensor_parallel), std::move(stages)).run();
}

}  // namespace loom::policy
