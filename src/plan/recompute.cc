#include "loom/plan/recompute.h"

#include <fmt/format.h>

namespace loom::plan {
namespace {

constexpr char kPlain = 1, kNested = 2;  // plan.recomputed's marks, bits

bool marked(const Plan& plan, SubOpId sub_op, char mark) {
  return sub_op.valid() && sub_op.index() < plan.recomputed.size() && (plan.recomputed[sub_op.index()] & mark) != 0;
}

}  // namespace

Expected<void> recompute(Plan& plan, std::span<const SubOpId> forward_sub_ops, bool nested) {
  for (SubOpId id : forward_sub_ops) {
    if (!id.valid() || id.index() >= plan.sub_ops.size()) return fail(fmt::format("recompute: no sub-op ${}", id.value));
    const SubOp& s = plan.sub_op(id);
    if (!s.live)
      return fail(fmt::format("recompute: sub-op '{}' was already transformed into parts", s.name),
                  "recompute its parts (plan.parts of the op)");
    if (plan.op_of(id).pass != ir::Pass::forward)
      return fail(fmt::format("recompute: sub-op '{}' is not a forward sub-op", s.name),
                  "only forward work can be run again for the backward pass");
  }
  if (plan.recomputed.size() < plan.sub_ops.size()) plan.recomputed.resize(plan.sub_ops.size(), 0);
  const char mark = nested ? kNested : kPlain;
  for (SubOpId id : forward_sub_ops) plan.recomputed[id.index()] |= mark;
  return {};
}

bool is_recomputed(const Plan& plan, SubOpId sub_op) { return marked(plan, sub_op, kPlain | kNested); }
bool is_plain_recompute(const Plan& plan, SubOpId sub_op) { return marked(plan, sub_op, kPlain); }
bool is_nested_recompute(const Plan& plan, SubOpId sub_op) { return marked(plan, sub_op, kNested); }

}  // namespace loom::plan
