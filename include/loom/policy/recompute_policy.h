// Activation recomputation as Megatron-LM offers it, written with plan::recompute (plan/recompute.h):
//   full       every forward op of each transformer layer is recomputed in its backward pass, except the
//              ops whose outputs leave the layer (the layer's output is the checkpoint);
//   selective  inside the layers, only the memory-bound ops (norms, activations, dropouts, reshapes,
//              softmax-like reductions) are recomputed: their outputs are large and cheap to redo, while
//              the tensor-core ops' outputs stay saved (Korthikanti et al. 2022; with a fused attention
//              kernel the attention core already saves nothing).
// Layers are the ops sharing layer_of(name) (policy/stages.h); ops outside layers are never recomputed.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"

namespace loom::policy {

enum class Recompute : std::uint8_t { none, selective, full };
std::string_view name(Recompute recompute);  // "none", "selective", "full"
Expected<Recompute> parse_recompute(std::string_view text);

// Marks the live forward sub-ops `recompute` selects; call after the policy has transformed the plan.
// `catalog` classes the ops for selective recomputation (a traced graph's custom ops join the built-ins).
Expected<void> apply_recompute(plan::Plan& plan, Recompute recompute,
                               const ir::OpCatalog& catalog = ops::builtin_ops());

}  // namespace loom::policy
