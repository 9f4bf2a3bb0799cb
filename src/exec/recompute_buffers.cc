#include "recompute_buffers.h"

#include <fmt/format.h>

#include "loom/plan/recompute.h"

namespace loom::exec::detail {

RecomputedBuffers::RecomputedBuffers(const plan::Plan& plan, ProgramBuilder& builder)
    : plan_(plan), builder_(builder) {
  for (const plan::SubOp& s : plan.sub_ops) {
    if (!s.live || !plan::is_recomputed(plan, s.id)) continue;
    for (auto& outputs : rerun_outputs_) outputs.resize(plan.sub_ops.size());
    for (std::size_t k = 0; k < s.outputs.size(); ++k)
      if (s.outputs[k].value.is_whole())  // partial sums leave by communication: checkpoints
        producers_.try_emplace(NeedKey{s.device, plan::normalized(s.outputs[k])}, s.id, k);
  }
}

bool RecomputedBuffers::serves(const plan::SubOp& consumer, const plan::SubTensor& piece) const {
  return !producers_.empty() && plan_.op_of(consumer.id).pass == ir::Pass::backward &&
         producers_.contains(NeedView{consumer.device, &piece});
}

Expected<BufferId> RecomputedBuffers::need(const plan::SubOp& consumer, const plan::SubTensor& piece,
                                           const NeedFn& need_checkpoint) {
  const auto& [producer, k] = producers_.find(NeedView{consumer.device, &piece})->second;
  LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId>* outputs, rerun(producer, Context::reader, need_checkpoint));
  return (*outputs)[k];
}

Expected<const std::vector<BufferId>*> RecomputedBuffers::rerun(plan::SubOpId id, Context context,
                                                                const NeedFn& need_checkpoint) {
  if (!plan::is_nested_recompute(plan_, id)) context = Context::outer;  // its inputs then come from the outer one
  std::vector<BufferId>& done = rerun_outputs_[static_cast<std::size_t>(context)][id.index()];
  if (!done.empty()) return &done;
  const plan::SubOp& s = plan_.sub_op(id);
  Compute compute{s.id, {}, {}};
  const auto input = [&](const plan::SubTensor& in) -> Expected<BufferId> {
    const auto it = producers_.find(NeedView{s.device, &in});
    if (it == producers_.end()) return need_checkpoint(s, in);
    LOOM_ASSIGN_OR_RETURN(const std::vector<BufferId>* upstream, rerun(it->second.first, context, need_checkpoint));
    return (*upstream)[it->second.second];
  };
  LOOM_ASSIGN_OR_RETURN(compute.inputs, input_buffers(plan_, s, input, fmt::format("recomputed '{}'", s.name)));
  for (const plan::SubTensor& out : s.outputs) compute.outputs.push_back(builder_.new_buffer(s.device, out));
  done = compute.outputs;
  builder_.compute(s.device, std::move(compute));
  ++builder_.stats().recomputed;
  return &done;
}

}  // namespace loom::exec::detail
