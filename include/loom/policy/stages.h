// Pipeline stages: the forward ops cut into contiguous groups of program order, either with roughly
// equal training FLOPs (each forward op's own plus its backward op's, so a forward-only stretch such as
// AlphaFold2's recycling passes counts for less), or of whole layers: equal layer counts as Megatron-LM
// cuts its model chunks, or layers grouped so the costliest stage costs least (balanced_layer_stages).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"

namespace loom::policy {

// By OpId: the stage (0 .. stages-1) of each forward op, -1 for the other ops. Stages never decrease
// along program order. Errors: stages < 1, or a stage left without an op that sees the batch (too
// many stages for the model).
// `catalog` gives the ops' FLOPs (a traced graph's custom ops join the built-ins).
Expected<std::vector<int>> pipeline_stages(const plan::Plan& plan, int stages,
                                           const ir::OpCatalog& catalog = ops::builtin_ops());

// The layer of an op name: the name up to its last purely numeric component ("layers.3" of
// "layers.3.attn.qkv", "layers.1.blocks.0" of Swin's "layers.1.blocks.0.mlp.fc1"); "" for ops outside
// numbered layers (embeddings, final norms, heads, losses).
std::string_view layer_of(std::string_view op_name);

// By OpId: the ordinal of a forward op's layer, layers numbered in order of their first op (distinct
// layer_of names among the forward ops); -1 for ops outside numbered layers and for the other passes.
std::vector<int> layer_ordinals(const ir::Graph& graph);

// By OpId: stages of whole layers, as pipeline_stages returns them. The L layers (distinct layer_of
// names among the forward ops, in order of first appearance) go L / stages to a stage; an op outside the
// layers joins the stage of the last layer before it (the first stage when none), so embeddings open the
// first stage and the head and loss close the last. Errors: stages < 1, a model without numbered layers,
// and L not divisible by stages.
Expected<std::vector<int>> layer_stages(const plan::Plan& plan, int stages);

// By OpId: each forward op's training FLOPs, its own plus its backward op's (0 for the other ops).
Expected<std::vector<double>> training_flops(const ir::Graph& graph, const ir::OpCatalog& catalog);

// The sizes of `parts` contiguous groups of `costs` (each of at least one item) whose largest sum is the
// smallest possible; among the partitions within 1e-9 relative of that optimum, the lexicographically
// smallest sizes (earlier groups as small as they may be: 1F1B's earlier stages hold more micro-batches'
// activations, so they are the ones to lighten). Exact, by dynamic programming in O(parts x n^2).
// Negative costs count as 0. Errors: parts < 1, or more parts than items.
Expected<std::vector<int>> balanced_partition(std::span<const double> costs, int parts);

// The cost of each layer, by layer ordinal: the sum of `op_cost` (by OpId) over its forward ops and the
// ops outside numbered layers that join it as layer_stages places them.
std::vector<double> layer_costs(const ir::Graph& graph, std::span<const double> op_cost);

// Whether every layer's own ops (those named inside it) cost the same by `op_cost` (by OpId), within
// 1e-9 relative: a transformer's identical blocks. False for a model without numbered layers.
bool uniform_layers(const ir::Graph& graph, std::span<const double> op_cost);

// By OpId: stages of whole layers, as layer_stages places them, with the layers grouped by
// balanced_partition over layer_costs(op_cost): the stage that costs most costs least. Errors: stages < 1,
// a model without numbered layers, fewer layers than stages, a stage without an op that sees the batch.
Expected<std::vector<int>> balanced_layer_stages(const plan::Plan& plan, int stages, std::span<const double> op_cost);

}  // namespace loom::policy
