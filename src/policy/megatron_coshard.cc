// The Composer's coshard (megatron_composer.h, policy/coshard.h): a cosharded op's tp parts split again
// on their device, and each region's chains ordered one after another and recomputed.
#include <fmt/format.h>

#include <algorithm>

#include "loom/plan/recompute.h"
#include "megatron_composer.h"

namespace loom::policy::detail {

using plan::SubOpId;

Expected<std::vector<SubOpId>> Composer::coshard(const ir::Op& op, SubOpId tp_part, std::size_t slot) {
  const std::optional<std::string>& x = coshard_.identifiers[op.id.index()];
  if (!x) return std::vector<SubOpId>{tp_part};
  // The regions come from the same analysis as tensor parallelism's: at tp > 1 each cosharded op is
  // already split along its identifier, and the parts of a tp part continue its range.
  const auto& tensor_split = tp_layout_.splits[op.id.index()];
  if (c_.tp > 1 && (!tensor_split || tensor_split->identifier != *x))
    return fail(fmt::format("coshard: op '{}' is in a region of layer ops split along '{}', but tensor parallelism {} "
                            "does not split it so",
                            op.name, *x, c_.tp),
                "coshard the regions tensor parallelism splits (--coshard-ops, --coshard-layers)");
  LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> parts,
                        with_context(split(plan_, tp_part, plan::SplitAlgo{*x}, coshard_.parts),
                                     fmt::format("coshard {} of op '{}' along '{}'", coshard_.parts, op.name, *x)));
  auto& slots = chains_[op.id.index()];
  if (slots.empty()) slots.resize(static_cast<std::size_t>(c_.micro_batches) * c_.dp * c_.tp);
  slots[slot] = parts;
  return parts;
}

// Chain i of a region (per micro-batch, dp rank and tp rank) is the i-th part of each of its ops. Its
// sinks run before chain i + 1's sources in forward; in backward the chains run in reverse (the order
// the schedule's blocks take them in: a backward block is its forward block reversed), chain i + 1's
// sources' backward before chain i's sinks'. Every part is recomputed, so its activations die after
// its chain's forward and are rebuilt just before its chain's backward. The parts are nested
// (plan/recompute.h): under full recompute the layer's recomputation runs them to rebuild the region's
// summed output, and each chain runs once more for its own backward, one chain live at a time.
Expected<void> Composer::order_coshard_chains() {
  std::vector<SubOpId> recomputed;
  const auto chains = static_cast<std::size_t>(coshard_.parts);
  for (const CoshardRegion& region : coshard_.regions) {
    const std::size_t slots = chains_[region.ops.front().index()].size();
    for (ir::OpId op : region.ops) {
      const auto& placed = chains_[op.index()];
      if (placed.size() != slots || std::ranges::any_of(placed, [&](const auto& p) { return p.size() != chains; }))
        return fail(fmt::format("coshard: op '{}' of a coshard region was not split into {} parts on every rank",
                                graph_.op(op).name, chains),
                    "coshard splits the ops that see the batch inside tensor-parallel regions; report this plan");
    }
    for (std::size_t slot = 0; slot < slots; ++slot) {
      const auto part = [&](ir::OpId op, std::size_t chain) { return chains_[op.index()][slot][chain]; };
      for (std::size_t i = 0; i + 1 < chains; ++i)
        for (ir::OpId sink : region.sinks)
          for (ir::OpId source : region.sources) {
            const SubOpId before = part(sink, i), after = part(source, i + 1);
            LOOM_RETURN_IF_ERROR(with_context(plan::order(plan_, before, after), "coshard chains"));
            const SubOpId backward_before = plan_.sub_op(after).mirror, backward_after = plan_.sub_op(before).mirror;
            if (backward_before.valid() && backward_after.valid())
              LOOM_RETURN_IF_ERROR(with_context(plan::order(plan_, backward_before, backward_after), "coshard chains"));
          }
      for (ir::OpId op : region.ops)
        for (std::size_t i = 0; i < chains; ++i) recomputed.push_back(part(op, i));
    }
  }
  return plan::recompute(plan_, recomputed, /*nested=*/true);
}

}  // namespace loom::policy::detail
