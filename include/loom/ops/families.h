// One registration function per operator family (one source file each, src/ops/<family>.cc).
#pragma once

#include "loom/ops/registry.h"

namespace loom::ops {

void register_linalg_ops(OpRegistry& registry);       // matmul, bmm, linear, einsum
void register_elementwise_ops(OpRegistry& registry);  // broadcasting arithmetic, unary math, clamp, where, masked_fill, cast
void register_activation_ops(OpRegistry& registry);   // gelu, relu, silu, swiglu, softmax, dropout
void register_norm_ops(OpRegistry& registry);         // layer_norm, rms_norm, batch_norm, group_norm
void register_batch_norm_parts_ops(OpRegistry& registry);  // batch_norm_sums, _centered_sums, _from_sums
void register_embedding_ops(OpRegistry& registry);    // embedding
void register_attention_ops(OpRegistry& registry);    // scaled dot-product attention, rotary embedding
void register_conv_pool_ops(OpRegistry& registry);    // conv2d, pooling, upsampling
void register_shape_ops(OpRegistry& registry);        // reshape, permute, transpose, split, concat, chunk
void register_reduce_ops(OpRegistry& registry);       // sum, mean, max
void register_loss_ops(OpRegistry& registry);         // cross_entropy, mse_loss
void register_cross_entropy_parts_ops(OpRegistry& registry);  // target_logit, cross_entropy_parts, _from_parts
void register_moe_ops(OpRegistry& registry);          // gate, dispatch, combine
void register_alphafold_ops(OpRegistry& registry);    // triangle updates, outer-product mean, MSA attention
void register_swin_ops(OpRegistry& registry);         // window partition / reverse, patch merging, cyclic shift
void register_optimizer_ops(OpRegistry& registry);    // sgd, adam, adamw
void register_autograd_ops(OpRegistry& registry);     // accumulate (gradient sum), fill_like (loss seed)
void register_comparison_ops(OpRegistry& registry);   // eq, ne, lt, le, gt, ge (booleans), maximum, minimum
void register_scan_ops(OpRegistry& registry);         // cumsum
void register_gather_ops(OpRegistry& registry);       // index_select
void register_routing_ops(OpRegistry& registry);      // topk
void register_padding_ops(OpRegistry& registry);      // pad (constant)
void register_resample_ops(OpRegistry& registry);     // upsample_bilinear2d

}  // namespace loom::ops
