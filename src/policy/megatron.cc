// Megatron-LM's dp x tp x pp (policy.h), composed from the primitives and the plan helpers.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/primitives.h"
#include "loom/plan/schedule.h"
#include "loom/policy/policy.h"
#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"
#include "loom/policy/zero.h"

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

// The schedule template of a pipeline: interleaved 1F1B whenever a device holds several model chunks.
plan::ScheduleKind schedule_kind(const ParallelConfig& config) {
  return config.virtual_stages > 1 ? plan::ScheduleKind::interleaved_one_f_one_b : config.schedule;
}

// Interleaving needs a pipeline, a 1F1B schedule, and micro-batches in groups of pp.
Expected<void> check_interleaving(const ParallelConfig& config) {
  if (config.virtual_stages < 1)
    return fail(fmt::format("virtual_stages is {}; it must be at least 1", config.virtual_stages));
  if (config.virtual_stages > 1 && config.pp == 1)
    return fail(fmt::format("{} model chunks per device need a pipeline, but pp is 1", config.virtual_stages),
                "set pp > 1, or leave virtual_stages at 1");
  if (config.virtual_stages > 1 && config.schedule == plan::ScheduleKind::gpipe)
    return fail(fmt::format("{} model chunks per device need the interleaved 1F1B schedule, not GPipe",
                            config.virtual_stages),
                "use the 1F1B schedule (interleaved when virtual_stages > 1)");
  if (schedule_kind(config) == plan::ScheduleKind::interleaved_one_f_one_b && config.micro_batches > 1 &&
      config.micro_batches % config.pp != 0)
    return fail(fmt::format("interleaved 1F1B: {} micro-batches are not a multiple of pp {}", config.micro_batches,
                            config.pp),
                "Megatron's interleaved schedule runs micro-batches in groups of pp; use a multiple of pp");
  return {};
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
        virtual_stage_(std::move(stages)),
        stage_(pipeline_ranks(virtual_stage_, config.pp)),
        tensor_stage_(tensor_stages(graph_, stage_)),
        batch_(plan::batch_identifiers(plan)),
        batch_dims_(tensor_batch_dims(plan, batch_)),
        producers_(ir::producers(*plan.graph)),
        blocks_(static_cast<std::size_t>(device_count(config) * config.virtual_stages),
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
    const int virtual_stage = virtual_stage_[op.id.index()];
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
          if (batch) blocks_[block_slot(virtual_stage, r, j)][k].push_back(part);
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
  // tensor-parallel dimension (replicated when it has none). An accumulation of a parameter's partial
  // sums from every micro-batch and dp rank is split by value the same way instead, so each device adds
  // its own partial sums and one reduction per step follows. With ZeRO, optimizer steps are placed by
  // place_zero_step (policy/zero.h).
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
    if (op.pass == ir::Pass::optimizer && c_.zero > 0)
      return with_context(place_zero_step(plan_, whole, tensor_algo(op, tensor), c_,
                                          [&](int r, int j) { return device(stage, r, j); }),
                          context);
    // Partial sums of every micro-batch and dp rank: value parts k x dp + r of micro_batches x dp.
    const std::int64_t sums = c_.micro_batches * c_.dp;
    // Split per micro-batch, the partial sums are added as they arrive (exec/gradient_accumulation.h), so
    // a few buffers are alive instead of one per micro-batch. (A tied embedding's head gradient then
    // crosses the pipeline once per micro-batch; summing it on its own stage first needs the
    // accumulation split by input, which trans cannot express yet.)
    const bool accumulate = !batch && sums > 1 && plan_.layouts[op.id.index()].linear && partial_sums_of(op) == sums;
    const TransAlgo data = accumulate ? TransAlgo{plan::ValueSplitAlgo{}} : algo(batch);
    const TransAlgo tensor_split = accumulate ? algo(tensor) : tensor_algo(op, tensor);
    std::vector<SubOpId> pieces{whole};
    if ((batch || accumulate) && c_.micro_batches > 1) {
      LOOM_ASSIGN_OR_RETURN(pieces, with_context(split(plan_, whole, data, c_.micro_batches), context));
    }
    for (SubOpId piece : pieces) {
      LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> dp_parts, with_context(split(plan_, piece, data, c_.dp), context));
      for (int r = 0; r < c_.dp; ++r) {
        LOOM_ASSIGN_OR_RETURN(
            std::vector<SubOpId> tp_parts,
            with_context(split(plan_, dp_parts[static_cast<std::size_t>(r)], tensor_split, c_.tp), context));
        for (int j = 0; j < c_.tp; ++j)
          LOOM_RETURN_IF_ERROR(plan::assign(plan_, tp_parts[static_cast<std::size_t>(j)], device(stage, r, j)));
      }
    }
    return {};
  }

  // The value count every producer part of every input of `op` writes it with (0 when they differ, or
  // an input is not produced).
  std::int64_t partial_sums_of(const ir::Op& op) const {
    std::int64_t count = -1;
    for (ir::TensorId in : op.inputs) {
      const ir::OpId producer = producers_[in.index()];
      if (!producer.valid()) return 0;
      for (SubOpId part : plan_.parts[producer.index()]) {
        const plan::SubOp& sub = plan_.sub_op(part);
        const auto& outputs = graph_.op(sub.op).outputs;
        for (std::size_t j = 0; j < outputs.size(); ++j)
          if (outputs[j] == in) {
            if (count >= 0 && sub.outputs[j].value.count != count) return 0;
            count = sub.outputs[j].value.count;
          }
      }
    }
    return std::max<std::int64_t>(count, 0);
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

  // One pipeline per (dp rank, tp rank): its stages' forward parts per micro-batch (pp x
  // virtual_stages stages, chunk c of rank s being stage c * pp + s), ordered by the schedule template.
  Expected<void> schedule() {
    // One stage with micro-batches accumulates gradients: its template (1F1B: F0 B0 F1 B1 ...) keeps one
    // micro-batch's activations alive at a time, as gradient accumulation does.
    if (c_.pp == 1 && c_.micro_batches == 1) return {};
    const plan::Schedule schedule{.kind = schedule_kind(c_), .chunks = c_.virtual_stages};
    BlockStarts starts(static_cast<std::size_t>(device_count(c_)));
    for (int r = 0; r < c_.dp; ++r)
      for (int j = 0; j < c_.tp; ++j) {
        std::vector<std::vector<std::vector<SubOpId>>> stages;
        for (int s = 0; s < c_.pp * c_.virtual_stages; ++s) stages.push_back(blocks_[block_slot(s, r, j)]);
        LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<plan::Block>> sequences,
                              with_context(plan::apply_schedule(plan_, schedule, stages),
                                           fmt::format("pipeline of dp rank {}, tp rank {}", r, j)));
        // Where each backward block starts: after the last sub-op of the block before it.
        for (int s = 0; s < c_.pp; ++s) {
          SubOpId previous;
          for (const plan::Block& b : sequences[static_cast<std::size_t>(s)]) {
            const auto& forward = stages[static_cast<std::size_t>(b.stage)][static_cast<std::size_t>(b.micro_batch)];
            const std::vector<SubOpId> sub_ops = plan::block_sub_ops(plan_, forward, b.pass);
            if (sub_ops.empty()) continue;
            if (b.pass == ir::Pass::backward && previous.valid())
              starts[static_cast<std::size_t>(device(s, r, j))][{b.stage, b.micro_batch}] = previous;
            previous = sub_ops.back();
          }
        }
      }
    return order_gradient_accumulations(starts);
  }

  // By device, (stage, micro-batch) of a backward block -> the last sub-op of the block before it.
  using BlockStarts = std::vector<std::map<std::pair<int, int>, SubOpId>>;

  // The accumulation of an activation's gradient over its readers (a follower, per micro-batch) runs in
  // the backward block of the activation's producer, which reads it: it is ordered after the block
  // before, so that order completion cannot hoist the accumulation of a later micro-batch, which waits
  // for that micro-batch's gradients, ahead of earlier blocks on the device (a stall the schedule
  // template does not have).
  Expected<void> order_gradient_accumulations(const BlockStarts& starts) {
    std::vector<int> producer_stage(graph_.tensors.size(), -1);
    for (const ir::Op& op : graph_.ops)
      if (op.pass == ir::Pass::forward && batch_[op.id.index()])
        for (ir::TensorId t : op.outputs) producer_stage[t.index()] = virtual_stage_[op.id.index()];
    for (const ir::Op& op : graph_.ops) {
      if (op.pass != ir::Pass::backward || op.is_mirror() || op.outputs.empty()) continue;
      const ir::TensorId owner = graph_.tensor(op.outputs.front()).owner;
      if (!owner.valid() || producer_stage[owner.index()] < 0 || batch_dims_[owner.index()] < 0) continue;
      const auto dim = static_cast<std::size_t>(batch_dims_[owner.index()]);
      const std::int64_t per_micro_batch = graph_.tensor(owner).shape[dim] / c_.micro_batches;
      for (SubOpId part : plan_.parts[op.id.index()]) {
        const plan::SubOp& sub = plan_.sub_op(part);
        const auto micro_batch = static_cast<int>(sub.outputs.front().box[dim].start / per_micro_batch);
        const auto& device_starts = starts[static_cast<std::size_t>(sub.device)];
        if (const auto it = device_starts.find({producer_stage[owner.index()], micro_batch}); it != device_starts.end())
          LOOM_RETURN_IF_ERROR(with_context(plan::order(plan_, it->second, part), "ordering gradient accumulations"));
      }
    }
    return {};
  }

  std::size_t block_slot(int virtual_stage, int r, int j) const {
    return static_cast<std::size_t>((virtual_stage * c_.dp + r) * c_.tp + j);
  }

  // The pipeline rank of each op from its stage in program order: chunk c of rank s is stage c * pp + s.
  static std::vector<int> pipeline_ranks(std::vector<int> stages, int pp) {
    for (int& s : stages)
      if (s >= 0) s %= pp;
    return stages;
  }

  Plan& plan_;
  const ir::Graph& graph_;
  const ParallelConfig& c_;
  TensorParallelLayout tp_layout_;
  std::vector<int> virtual_stage_;  // by OpId, forward ops: the stage in program order (chunk * pp + rank)
  std::vector<int> stage_;         // by OpId, forward ops: the pipeline rank
  std::vector<int> tensor_stage_;  // by TensorId
  std::vector<std::optional<std::string>> batch_;
  std::vector<int> batch_dims_;
  std::vector<ir::OpId> producers_;  // by TensorId: the op writing it
  // [block_slot(virtual stage, dp rank, tp rank)][micro-batch]: forward parts, program order.
  std::vector<std::vector<std::vector<SubOpId>>> blocks_;
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

Expected<std::vector<int>> megatron_stages(const Plan& plan, const ParallelConfig& config) {
  // Stages in program order: whole layers, as Megatron cuts them (a cut inside a layer would send the
  // partial sums of a row-parallel output, not the reduced activation); with interleaving, pp x
  // virtual_stages chunks of whole layers. Balanced FLOPs where the layers do not divide.
  Expected<std::vector<int>> by_layers = layer_stages(plan, config.pp * config.virtual_stages);
  if (!by_layers && config.virtual_stages > 1)
    return std::unexpected(
        with_context(by_layers.error(), fmt::format("pp {} x {} model chunks", config.pp, config.virtual_stages)));
  return by_layers ? std::move(by_layers) : pipeline_stages(plan, config.pp);
}

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
  LOOM_RETURN_IF_ERROR(check_interleaving(config));
  LOOM_RETURN_IF_ERROR(check_fresh(plan));
  LOOM_ASSIGN_OR_RETURN(TensorParallelLayout tensor_parallel,
                        tensor_parallel_layout(plan, config.tp, config.sequence_parallel));
  LOOM_ASSIGN_OR_RETURN(std::vector<int> stages, megatron_stages(plan, config));
  LOOM_RETURN_IF_ERROR(Composer(plan, config, std::move(tensor_parallel), std::move(stages)).run());
  return apply_recompute(plan, config.recompute);
}

}  // namespace loom::policy
