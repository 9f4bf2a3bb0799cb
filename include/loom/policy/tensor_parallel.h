// Where Megatron-style tensor parallelism splits each forward op (Shoeybi et al. 2019), derived from the
// ops' annotations and the dataflow rather than from layer names, so one rule serves every family:
//
//  - Column-parallel seeds: a linear whose output features ('o') can be carried, op by op, to
//    row-parallel linears without ever being gathered: every op reached must split the same dimension
//    (reshapes to heads, chunks of a fused qkv, transposes, attention over heads, activations) and every
//    path must end in a reduction ('+', e.g. the 'i+' of the output projection or fc2), whose outputs
//    are partial sums. This finds attention (qkv or q/k/v/kv column-parallel, heads split, the output
//    projection row-parallel) and MLPs (fc1/gate/up column, activation, fc2/down row) in GPT, LLaMA,
//    BERT, T5/mBART (cross-attention too), MoE's dense layers, Swin's window attention and MLP, and
//    AlphaFold2's transitions; a linear whose split would reach a LayerNorm, a loss or the residual
//    stream (output projections, Swin's patch-merge reduction) stays replicated. A matmul (or einsum)
//    whose right operand is a parameter [k, n] is a linear with a transposed weight (traced HuggingFace
//    Conv1D projections): n is its column-parallel dimension.
//  - Vocabulary-parallel LM heads: the language models' loss is built from ops linear in the
//    vocabulary (target_logit, cross_entropy_parts; src/ops/cross_entropy_parts.cc), so the head is a
//    column-parallel seed whose region closes in the loss: each rank computes logits [.., v/tp] and the
//    loss exchanges per-token scalars. When tp does not divide the vocabulary (GPT's 50257) the head
//    stays replicated, as the embedding does; Megatron pads the vocabulary instead.
//  - Expert parallelism: moe_dispatch split along its experts dimension, carried through the expert
//    FFN einsums to moe_combine's expert reduction (GShard experts across tp ranks).
//  - Fused head-parallel ops: an op whose reduction identifier occurs only in its parameters (the
//    heads of AlphaFold2's gated MSA-row, MSA-column and triangle attentions, which include their
//    output projection) is split along it: each rank computes its heads and a partial output.
//  - Vocabulary-parallel embeddings: an embedding of batch-carrying ids is split along its table's rows
//    ('v+') when tp divides them (partial sums, zero outside a rank's rows); otherwise replicated.
//    The zoo lays fused projections out per head (Megatron's [heads, (q k v), head_dim], and [kv_heads,
//    (k v), head_dim] for cross-attention), so contiguous splits give each rank whole heads and no
//    strided split is needed.
//  - Everything else is replicated across the tp ranks: norms, residual adds, dropout on the residual
//    stream, the loss's final mean (and cross_entropy, whose vocabulary is frozen), MoE gates,
//    AlphaFold2's outer product mean and triangle multiplications, Swin's window partition/shift/merge,
//    and ops that see no batch (position tables, relative-position biases), which data parallelism
//    replicates.
//  - Sequence parallelism (Korthikanti et al. 2022), when asked for: of the ops above that see the
//    batch, those that carry the sequence are split along it instead of replicated (layer norms,
//    dropouts, residual adds, embedding sums, and, since they work token by token here, the replicated
//    LM head and the loss). Between a sequence-split op and a tensor-parallel region the row-parallel
//    output's partial sums become a reduce-scatter and the column-parallel input an all-gather (and
//    the reverse in backward), where tensor parallelism alone all-reduces. The sequence of a tensor is
//    dimension 1 of the rank-2 integer graph inputs (token ids and labels, [batch, seq]), followed
//    through the ops as the batch is (plan::batch_identifiers): an op takes the identifier at the
//    sequence dimension of its first input that has one and may split it, and its outputs holding that
//    identifier carry the sequence on; a view merging the sequence after the batch (HuggingFace's Conv1D
//    rows "(b s) h") cannot split it, so it and what reads it keep the whole sequence (gathered before).
//    Models without token inputs (images) have no sequence to split.
#pragma once

#include <optional>
#include <vector>

#include "loom/core/error.h"
#include "loom/plan/plan.h"
#include "loom/plan/primitives.h"

namespace loom::policy {

struct TensorParallelLayout {
  std::vector<std::optional<plan::SplitAlgo>> splits;  // by OpId, forward ops only; nullopt: replicate
  // By TensorId: the dimension split across the tp ranks (-1: whole, or partial sums). For parameters,
  // the dimension the first consumer that splits it slices; their optimizer steps split the same way.
  // For activations split along the sequence, their sequence dimension, unless only tensor-parallel
  // ops read them (their gradients come back as partial sums).
  std::vector<int> tensor_dims;
  std::vector<bool> sequence_split;  // by OpId: the op's split is sequence parallelism's
};

// Reads annotations only (the plan is not changed). Errors: tp < 1, a split dimension tp does not
// divide, naming the op, its annotation, the identifier and its size, and sequence parallelism without
// tp > 1 or in a model where no op carries the sequence.
Expected<TensorParallelLayout> tensor_parallel_layout(const plan::Plan& plan, int tp, bool sequence_parallel = false);

// The regions alone, as at a degree that divides every split dimension (no sequence parallelism): where
// coshard (policy/coshard.h) finds the regions it splits, tp = 1 included.
Expected<TensorParallelLayout> tensor_parallel_regions(const plan::Plan& plan);

}  // namespace loom::policy
