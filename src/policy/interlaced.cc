// The interlaced pipeline's shared ops (policy/interlaced.h): the tied embedding table, its lookups, and
// the head with everything after it, found from the dataflow; their vocabulary splits taken from the
// tensor-parallel regions (policy/tensor_parallel.h), which already make the lookups and the head
// vocabulary-parallel.
#include "loom/policy/interlaced.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/ir/graph.h"
#include "loom/policy/policy.h"
#include "loom/policy/tensor_parallel.h"

namespace loom::policy {
namespace {

bool is_head_type(const std::string& type) { return type == "linear" || type == "matmul"; }

}  // namespace

Expected<InterlacedLayout> interlaced_layout(const plan::Plan& plan, int parts) {
  const ir::Graph& graph = *plan.graph;
  if (parts < 1) return fail(fmt::format("interlaced: {} devices per replica; there must be at least 1", parts));
  // The table: the largest parameter a lookup reads (weight: input 1) that a head also reads.
  const std::vector<std::vector<ir::OpId>> readers = ir::consumers(graph);
  ir::TensorId table, any_lookup_table;
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || op.type != "embedding" || op.inputs.size() < 2) continue;
    const ir::TensorId weight = op.inputs[1];
    if (graph.tensor(weight).role != ir::TensorRole::parameter) continue;
    any_lookup_table = weight;
    const bool tied = std::ranges::any_of(readers[weight.index()], [&](ir::OpId r) {
      return graph.op(r).pass == ir::Pass::forward && is_head_type(graph.op(r).type);
    });
    if (tied && (!table.valid() || graph.tensor(weight).shape.numel() > graph.tensor(table).shape.numel()))
      table = weight;
  }
  if (!any_lookup_table.valid())
    return fail(fmt::format("interlaced: model '{}' has no token embedding (an 'embedding' op reading a parameter "
                            "table) to spread over the devices",
                            graph.name),
                "the interlaced pipeline is for models with a large embedding tied to the LM head (T5, mBART); use "
                "'megatron'");
  if (!table.valid())
    return fail(fmt::format("interlaced: no LM head ('linear' or 'matmul') of model '{}' reads the embedding table "
                            "'{}': the head is not tied to it",
                            graph.name, graph.tensor(any_lookup_table).name),
                "the interlaced pipeline spreads a table its lookups and the head share (T5, mBART); use 'megatron'");
  const std::int64_t rows = graph.tensor(table).shape[0];
  if (rows % parts != 0)
    return fail(fmt::format("interlaced: the {} rows of embedding table '{}' do not divide into pp x tp = {} parts",
                            rows, graph.tensor(table).name, parts),
                "choose pp x tp dividing the vocabulary (or pad it: --vocab-multiple)");

  LOOM_ASSIGN_OR_RETURN(const TensorParallelLayout regions, tensor_parallel_regions(plan));
  InterlacedLayout layout{.table = table,
                          .roles = std::vector<SharedRole>(graph.ops.size(), SharedRole::none),
                          .splits = std::vector<std::optional<plan::SplitAlgo>>(graph.ops.size()),
                          .shared_tensors = std::vector<bool>(graph.tensors.size()),
                          .tensor_dims = std::vector<int>(graph.tensors.size(), -1)};
  const auto share = [&](const ir::Op& op, SharedRole role) {
    layout.roles[op.id.index()] = role;
    layout.splits[op.id.index()] = regions.splits[op.id.index()];
  };
  // Lookups and heads of the table; then, in program order, every forward op reading a head's output.
  std::vector<bool> after_head(graph.tensors.size());
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward) continue;
    const bool reads_table = std::ranges::find(op.inputs, table) != op.inputs.end();
    const bool downstream = std::ranges::any_of(op.inputs, [&](ir::TensorId t) { return after_head[t.index()]; });
    if (reads_table && op.type == "embedding") share(op, SharedRole::embedding);
    else if (reads_table || downstream) {
      share(op, SharedRole::head);
      for (ir::TensorId out : op.outputs) after_head[out.index()] = true;
      for (ir::TensorId in : op.inputs)  // a bias after the head: its optimizer step is spread with it
        if (graph.tensor(in).role == ir::TensorRole::parameter) after_head[in.index()] = true;
    }
  }
  layout.shared_tensors[table.index()] = true;
  for (std::size_t t = 0; t < graph.tensors.size(); ++t)
    if (after_head[t] || t == table.index()) {
      layout.shared_tensors[t] = true;
      layout.tensor_dims[t] = regions.tensor_dims[t];
    }
  return layout;
}

Expected<void> check_interlaced(const ParallelConfig& config) {
  const auto refuse = [](std::string what) {
    return fail(fmt::format("the interlaced pipeline does not combine with {}", what),
                "use 1F1B without it (policy 'interlaced'), or the policy 'megatron'");
  };
  if (config.virtual_stages > 1 || config.schedule != plan::ScheduleKind::one_f_one_b)
    return refuse(fmt::format("the {} schedule", config.virtual_stages > 1 ? "interleaved 1F1B"
                                                                           : std::string(plan::name(config.schedule))));
  if (config.zero > 0) return refuse(fmt::format("ZeRO-{} (nnScaler's Fig. 8 runs it without ZeRO)", config.zero));
  if (config.coshard.parts > 1 || config.coshard.layers) return refuse("coshard");
  if (config.sequence_parallel) return refuse("sequence parallelism");
  if (config.overlap != Overlap::none) return refuse(fmt::format("{} overlap", name(config.overlap)));
  // Its own order already runs each block after the whole block before it (order_shared_barriers).
  if (config.block_order != plan::BlockOrder::strict)
    return refuse(fmt::format("the {} block order", plan::name(config.block_order)));
  return {};
}

}  // namespace loom::policy
