// Coshard (nnScaler §5, Fig. 5; the Swin plan of its Fig. 7): a tensor-parallel region split into C x tp
// parts along its identifier instead of tp, parts k*C .. k*C+C-1 co-located on tp rank k and run one after
// another, each recomputed in backward, so one part's activations are live at a time (the region's peak
// is about 1/C). With tp = 1 the C parts share the one device ("1.3B Swin on one GPU").
//
// A region is Megatron's (policy/tensor_parallel.h): the forward ops a column-parallel seed's split
// reaches, through to the row-parallel reductions that close it (attention heads from qkv to the output
// projection; the FFN width from fc1 / gate, up to fc2 / down). It is an attention region when it holds
// an attention op or a softmax (eager attention, models::AttentionImpl), an MLP region otherwise. Layers
// are identified as pipelines cut them (stages.h: layer_of names, numbered in order of first appearance);
// regions outside numbered layers (vocabulary-parallel heads and embeddings) are never cosharded.
//
// In the plan (megatron with ParallelConfig::coshard, written with trans / assign / order / recompute):
//   - each tp part of a region op (per micro-batch and dp rank) is split C ways more along the same
//     identifier, on the same device; chain i is the i-th part of every op of the region;
//   - forward, chain i runs before chain i + 1: order edges from each sink of chain i (the row-parallel
//     parts) to each source of chain i + 1 (its column-parallel seeds); backward runs the chains in
//     reverse, from the backward of chain i + 1's sources to that of chain i's sinks;
//   - every part is recomputed, nested (plan/recompute.h): its outputs die after their forward readers
//     and are rebuilt just before its chain's backward, from the region's input (the checkpoint). Under
//     full recompute the layer's recomputation also runs the chains, to rebuild the region's summed
//     output (summed again on the device, no transfer), so the layer input stays the only checkpoint;
//   - the C partial sums a device's row-parallel parts write are added on the device before the one
//     tp all-reduce (exec materialization's local sums);
//   - the optimizer steps (and gradient accumulations) of the parameters the parts slice, and the gradient
//     accumulations of the activations they write, are split the same C ways on each device: each
//     gradient box is reduced over dp on its own (one dp collective per box rather than point-to-point
//     fallbacks), and each accumulation stays inside its chain.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/graph.h"
#include "loom/ops/registry.h"
#include "loom/plan/plan.h"

namespace loom::policy {

// Layers [first, end) by ordinal; end -1: through the last layer. Text "A:B", "A:" or ":B" (as Python
// slices, without steps or negatives).
struct LayerRange {
  int first = 0;
  int end = -1;

  bool operator==(const LayerRange&) const = default;
};
Expected<LayerRange> parse_layer_range(std::string_view text);
std::string to_string(const LayerRange& range);  // "0:4", "2:"

// Which regions: attention, MLP or both. Text "attention", "mlp" or "attention,mlp".
struct CoshardOps {
  bool attention = true;
  bool mlp = true;

  bool operator==(const CoshardOps&) const = default;
};
Expected<CoshardOps> parse_coshard_ops(std::string_view text);
std::string to_string(const CoshardOps& ops);  // "attention,mlp"

struct CoshardConfig {
  // Parts per device (C); 0: the policy's default (the 'coshard' policy's kDefaultParts; 1, off, for
  // 'megatron').
  int parts = 0;
  // nullopt: the policy's default (every layer for 'megatron'; the first quarter for 'coshard').
  std::optional<LayerRange> layers;
  CoshardOps ops;

  bool operator==(const CoshardConfig&) const = default;
};

// The 'coshard' policy's defaults, after the paper's Swin plan (Fig. 7: 4 parts, the first layers,
// attention and MLP): kDefaultParts parts on the first quarter of the layers (at least one).
inline constexpr int kDefaultParts = 4;
// `config` with the 'coshard' policy's defaults where it leaves them unset, for a model of `layers` layers.
CoshardConfig with_coshard_defaults(CoshardConfig config, int layers);

// The coshard configuration `policy` applies to `plan`'s model: the 'coshard' policy's defaults filled in
// for its layers, `config` as given for the others.
CoshardConfig applied_coshard(const plan::Plan& plan, std::string_view policy, const CoshardConfig& config);

struct CoshardRegion {
  std::vector<ir::OpId> ops;      // forward ops, program order
  std::vector<ir::OpId> sources;  // ops reading no other op of the region (the column-parallel seeds)
  std::vector<ir::OpId> sinks;    // ops no other op of the region reads (the row-parallel reductions)
  bool attention = false;         // holds an attention op (else an MLP)
  int layer = -1;                 // its layer ordinal
};

struct CoshardPlan {
  int parts = 1;  // C (1: off)
  std::vector<CoshardRegion> regions;
  std::vector<std::optional<std::string>> identifiers;  // by OpId: the identifier a cosharded op splits
  // By TensorId: the dimension the cosharded ops split a tensor along: the parameters they read and the
  // activations they write (-1: none). The followers a tensor owns split the same way on each device: a
  // parameter's optimizer step and gradient accumulation, so each of the C gradient boxes a device writes
  // is reduced over dp (or reduce-scattered by ZeRO) on its own; an activation's gradient accumulation
  // (a tensor several ops of the region read, e.g. a traced GELU's input), so it stays in its chain.
  std::vector<int> tensor_dims;
};

// The regions `config` selects and the identifier each of their ops splits (parts 0 or 1: off, no
// regions; config is resolved: parts 0 means 1, layers nullopt every layer). Errors: parts below 0, a
// layer range outside the model's layers (naming their count), no region selected (a model without
// tensor-parallel regions, or none in the range), and tp x parts not dividing a cosharded op's split
// dimension (naming the op, the identifier and its size).
Expected<CoshardPlan> coshard_plan(const plan::Plan& plan, const CoshardConfig& config, int tp,
                                   const ir::OpCatalog& catalog = ops::builtin_ops());

}  // namespace loom::policy
