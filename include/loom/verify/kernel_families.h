// One registration function per op family (src/verify/kernels_<family>.cc), mirroring src/ops/.
#pragma once

#include "loom/verify/kernels.h"

namespace loom::verify {

void register_linalg_kernels(KernelRegistry& registry);
void register_elementwise_kernels(KernelRegistry& registry);
void register_activation_kernels(KernelRegistry& registry);
void register_norm_kernels(KernelRegistry& registry);
void register_batch_norm_parts_kernels(KernelRegistry& registry);  // called by register_norm_kernels
void register_embedding_kernels(KernelRegistry& registry);
void register_attention_kernels(KernelRegistry& registry);
void register_conv_pool_kernels(KernelRegistry& registry);
void register_shape_kernels(KernelRegistry& registry);
void register_reduce_kernels(KernelRegistry& registry);
void register_loss_kernels(KernelRegistry& registry);
void register_cross_entropy_parts_kernels(KernelRegistry& registry);  // called by register_loss_kernels
void register_moe_kernels(KernelRegistry& registry);
void register_alphafold_kernels(KernelRegistry& registry);
void register_swin_kernels(KernelRegistry& registry);
void register_optimizer_kernels(KernelRegistry& registry);
void register_autograd_kernels(KernelRegistry& registry);
void register_comparison_kernels(KernelRegistry& registry);  // called by register_elementwise_kernels
void register_scan_kernels(KernelRegistry& registry);        // called by register_shape_kernels
void register_gather_kernels(KernelRegistry& registry);      // called by register_shape_kernels
void register_padding_kernels(KernelRegistry& registry);     // called by register_shape_kernels
void register_routing_kernels(KernelRegistry& registry);     // called by register_shape_kernels
void register_resample_kernels(KernelRegistry& registry);    // called by register_shape_kernels

}  // namespace loom::verify
