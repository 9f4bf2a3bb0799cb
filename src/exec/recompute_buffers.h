// Private to materialization: serving backward readers of recomputed sub-ops' outputs (plan/recompute.h)
// by running those sub-ops again, on their device, right before the first such reader.
#pragma once

#include <functional>
#include <vector>

#include "need_groups.h"
#include "program_builder.h"

namespace loom::exec::detail {

class RecomputedBuffers {
 public:
  // How the materializer serves an ordinary need (a checkpoint: what the forward pass produced or moved).
  using NeedFn = std::function<Expected<BufferId>(const plan::SubOp& consumer, const plan::SubTensor& piece)>;

  RecomputedBuffers(const plan::Plan& plan, ProgramBuilder& builder);

  // Whether `consumer` (a backward sub-op) reads `piece` from a recomputed sub-op on its own device.
  bool serves(const plan::SubOp& consumer, const plan::SubTensor& piece) const;

  // The recomputed buffer of `piece` on the consumer's device, emitting the recomputation (and, first,
  // that of its recomputed inputs) the first time it is needed.
  Expected<BufferId> need(const plan::SubOp& consumer, const plan::SubTensor& piece, const NeedFn& need_checkpoint);

  bool empty() const { return producers_.empty(); }

  // The outputs of recomputed sub-op `id` run again on its device inside a larger recomputation (once;
  // later calls return them). A nested sub-op (plan/recompute.h) runs again apart for its own readers.
  Expected<const std::vector<BufferId>*> rerun(plan::SubOpId id, const NeedFn& need_checkpoint) {
    return rerun(id, Context::outer, need_checkpoint);
  }

 private:
  // Who asks for a rerun: a larger recomputation (the outer one), or a backward reader. Nested sub-ops
  // keep a rerun per context; the others one rerun, which both contexts share.
  enum class Context : std::size_t { outer = 0, reader = 1 };
  Expected<const std::vector<BufferId>*> rerun(plan::SubOpId id, Context context, const NeedFn& need_checkpoint);

  const plan::Plan& plan_;
  ProgramBuilder& builder_;
  NeedMap<std::pair<plan::SubOpId, std::size_t>> producers_;  // (device, whole piece) -> recomputed producer
  std::vector<std::vector<BufferId>> rerun_outputs_[2];        // by context, by sub-op, once recomputed
};

}  // namespace loom::exec::detail
