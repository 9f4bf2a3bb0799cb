// Models that run their layers several times with shared weights (AlphaFold2's recycles, nnScaler §4.2):
// how many passes, and the megatron configuration that pipelines them with the 3F1B schedule
// (plan/schedule_3f1b.h).
#pragma once

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/plan/plan.h"
#include "loom/policy/policy.h"

namespace loom::policy {

// How many numbered layers (layer_of, stages.h) read the first parameter any layer reads: 1 for a
// model whose layers each have their own weights, P for one that runs the same layers P times
// (AlphaFold2: "iteration0.evoformer.0" .. "iteration3.evoformer.0" read "evoformer.0.*").
int layer_passes(const ir::Graph& graph);

// The configuration megatron plans `config` (schedule three_f_one_b) with: the passes as model chunks
// (virtual_stages = P), so that layer_stages cuts each pass into pp stages of whole layers and pass p's
// stage s is chunk p of pipeline device s, the device of the same layers in every pass. Errors: pp of
// 1, --interleave given, a model with one pass, and a recycled pass with a backward (3F1B runs its
// recycles forward only).
Expected<ParallelConfig> three_f_one_b_config(const plan::Plan& plan, ParallelConfig config);

}  // namespace loom::policy
