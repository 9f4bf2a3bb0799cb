// Pipeline stages: the forward ops cut into contiguous groups of program order, either with roughly
// equal training FLOPs (each forward op's own plus its backward op's, so a forward-only stretch such as
// AlphaFold2's recycling passes counts for less), or, for interleaved pipelines, of whole layers as
// Megatron-LM cuts its model chunks.
#pragma once

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

}  // namespace loom::policy
