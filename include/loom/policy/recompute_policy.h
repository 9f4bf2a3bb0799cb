// Activation recomputation as Megatron-LM offers it, written with plan::recompute (plan/recompute.h):
//   full       every forward op of each transformer layer is recomputed in its backward pass, except the
//              ops whose outputs leave the layer (the layer's output is the checkpoint);
//   selective  Megatron-LM's selective recomputation (Korthikanti et al. 2022): in a layer whose attention
//              is spelled out as separate ops (eager, eager-fp32, a traced eager attention), exactly its core
//              attention (policy/attention_core.h: q·kᵀ to the merged context), so q, k, v stay saved and the
//              [b, heads, s, t] scores, probabilities and dropout do not, and nothing else of the layer. In a
//              layer with a fused attention kernel, which saves no scores (Megatron-LM's selective then
//              recomputes nothing), Loom recomputes the layer's memory-bound ops instead (norms,
//              activations, dropouts, reshapes: large outputs, cheap to redo; the tensor-core ops' outputs
//              stay saved), so that selective stays a level between none and full there.
//   memory-bound  in every layer, the memory-bound ops only, whatever the attention's form (selective's
//              meaning before it became Megatron-LM's): what a per-op recompute plan such as SuperScaler's
//              keeps apart from core attention, e.g. beside coshard, which reruns its parts' attention itself.
// Layers are the ops sharing layer_of(name) (policy/stages.h); ops outside layers are never recomputed.
#pragma once

#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"

namespace loom::policy {

enum class Recompute : std::uint8_t { none, selective, full, memory_bound };
std::string_view name(Recompute recompute);  // "none", "selective", "full", "memory-bound"
Expected<Recompute> parse_recompute(std::string_view text);

// Marks the live forward sub-ops `recompute` selects; call after the policy has transformed the plan.
// `catalog` classes the ops for selective recomputation (a traced graph's custom ops join the built-ins).
Expected<void> apply_recompute(plan::Plan& plan, Recompute recompute,
                               const ir::OpCatalog& catalog = ops::builtin_ops());

}  // namespace loom::policy
