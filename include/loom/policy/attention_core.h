// The core attention of attention spelled out as separate ops (models' --attention eager / eager-fp32, a
// traced eager attention): the unit Megatron-LM's selective recomputation checkpoints (Korthikanti et al.
// 2022, §4.2; Megatron-LM v3 ParallelAttention._checkpointed_attention_forward over CoreAttention, which
// runs from q, k, v to the context with its heads merged).
//
// Found by the graph's structure, not by op names: a forward softmax whose input comes, through pointwise
// or data-movement ops, from a contraction of two activations (the scores q·kᵀ: no parameter input), and
// whose output goes, through such ops each read by one forward op, into a contraction of two activations
// (the context p·v). The core is the two contractions, the ops on the softmax's path between them (score
// bias, fp32 casts, layer scaling, mask, softmax, dropout), and the data movement the context goes through
// until its next compute op (heads regrouped and merged). What the core reads from outside (q, k, v) is
// what a recomputation of it keeps. All ops of one core share layer_of(name) (policy/stages.h). A fused
// attention kernel (scaled_dot_product_attention) has no softmax op: no core.
#pragma once

#include <vector>

#include "loom/ir/graph.h"
#include "loom/ir/op_def.h"

namespace loom::policy {

// By OpId: 1 for the forward ops inside an eager attention core.
std::vector<char> attention_core_ops(const ir::Graph& graph, const ir::OpCatalog& catalog);

}  // namespace loom::policy
