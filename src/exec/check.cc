#include "loom/exec/check.h"

#include <algorithm>

#include <fmt/format.h>

#include "check_internal.h"
#include "loom/exec/exec_text.h"

namespace loom::exec {
namespace detail {

int Links::device_of(std::uint32_t global) const {
  // The last device whose program starts at or before `global` (empty programs share a start).
  const auto it = std::upper_bound(offsets.begin(), offsets.end() - 1, global);
  return static_cast<int>(it - offsets.begin()) - 1;
}

bool same_box(const std::vector<plan::IndexRange>& a, const std::vector<plan::IndexRange>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t d = 0; d < a.size(); ++d)
    if (a[d] != b[d] && a[d].normalized() != b[d].normalized()) return false;
  return true;
}

bool same_piece(const plan::SubTensor& a, const plan::SubTensor& b) {
  return a.tensor == b.tensor && a.value == b.value && same_box(a.box, b.box);
}

std::string site_to_text(const ExecPlan& exec, int device, std::size_t index) {
  return fmt::format("device {}, instruction {} ({})", device, index,
                     instruction_to_text(exec, exec.programs[static_cast<std::size_t>(device)][index]));
}

std::string site_to_text(const ExecPlan& exec, const Links& links, std::uint32_t global) {
  return site_to_text(exec, links.device_of(global), links.index_of(global));
}

}  // namespace detail

Expected<void> check_exec_plan(const ExecPlan& exec) {
  LOOM_ASSIGN_OR_RETURN(const detail::Links links, detail::check_structure(exec));
  LOOM_RETURN_IF_ERROR(detail::check_start_order(exec));
  return detail::check_progress(exec, links);
}

}  // namespace loom::exec
