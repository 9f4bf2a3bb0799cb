#include "loom/plan/micro_batches.h"

#include <algorithm>

#include <fmt/format.h>

#include "loom/plan/batch.h"
#include "loom/plan/primitives.h"

namespace loom::plan {

SubOpId MicroBatches::forward(ir::OpId op, int k) const {
  const auto it = std::find(ops.begin(), ops.end(), op);
  if (it == ops.end() || k < 0 || k >= count) return {};
  return parts[static_cast<std::size_t>(it - ops.begin())][static_cast<std::size_t>(k)];
}

std::vector<SubOpId> MicroBatches::micro_batch(std::span<const ir::OpId> wanted, int k) const {
  std::vector<SubOpId> result;
  for (ir::OpId op : wanted)
    if (const SubOpId id = forward(op, k); id.valid()) result.push_back(id);
  return result;
}

namespace {

// The size of the batch dimension the op's part sees: the first input whose dimension carries the
// identifier (trans would refuse the split too, but this error names the batch).
std::int64_t batch_size(const Plan& plan, SubOpId part, const std::string& identifier) {
  const SubOp& s = plan.sub_op(part);
  for (std::size_t i = 0; i < s.inputs.size(); ++i)
    for (std::size_t d = 0; d < s.inputs[i].box.size(); ++d)
      if (dim_identifier(plan, part, false, i, d) == identifier) return s.inputs[i].box[d].size();
  return -1;
}

}  // namespace

Expected<MicroBatches> split_micro_batches(Plan& plan, std::span<const ir::OpId> forward_ops, int n) {
  if (n < 1) return fail(fmt::format("split_micro_batches: cannot split into {} micro-batches", n));
  const std::vector<std::optional<std::string>> batch = batch_identifiers(plan);
  MicroBatches result;
  result.count = n;
  for (ir::OpId op_id : forward_ops) {
    if (!op_id.valid() || op_id.index() >= plan.graph->ops.size())
      return fail(fmt::format("split_micro_batches: no op #{}", op_id.value));
    const ir::Op& op = plan.graph->op(op_id);
    if (op.pass != ir::Pass::forward)
      return fail(fmt::format("split_micro_batches: op '{}' is not a forward op", op.name),
                  "list forward ops; their backward ops follow");
    if (std::find(result.ops.begin(), result.ops.end(), op_id) != result.ops.end())
      return fail(fmt::format("split_micro_batches: op '{}' is listed twice", op.name));
    const auto& live = plan.parts[op_id.index()];
    if (live.size() != 1)
      return fail(fmt::format("split_micro_batches: op '{}' has {} parts, not one", op.name, live.size()),
                  "split into micro-batches before any other transformation of the op");
    const std::optional<std::string>& id = batch[op_id.index()];
    if (!id)
      return fail(fmt::format("split_micro_batches: op '{}' has no batch identifier", op.name),
                  "leave ops that do not see the batch (parameter-only ops) out of the micro-batched subgraph");
    const std::int64_t size = batch_size(plan, live.front(), *id);
    if (size % n != 0)
      return fail(fmt::format("split_micro_batches: op '{}' has batch size {} (identifier '{}'), not divisible into {} "
                              "micro-batches",
                              op.name, size, *id, n));
    LOOM_ASSIGN_OR_RETURN(std::vector<SubOpId> parts,
                          with_context(trans(plan, live.front(), SplitAlgo{*id}, n),
                                       fmt::format("split_micro_batches: op '{}'", op.name)));
    result.ops.push_back(op_id);
    result.parts.push_back(std::move(parts));
  }
  return result;
}

}  // namespace loom::plan
