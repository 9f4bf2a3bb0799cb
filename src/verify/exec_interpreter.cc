// The scheduler of the ExecPlan interpreter: runs each device until it blocks, round after round, and
// names the blocked devices when a round makes no progress.
#include "loom/verify/exec_interpreter.h"

#include "exec_machine.h"
#include "loom/exec/exec_text.h"
#include "loom/core/strings.h"
#include "plan_assembly.h"

namespace loom::verify {
namespace detail {

Machine::Machine(const exec::ExecPlan& exec, const std::vector<NdArray>& initial, const KernelRegistry& kernels)
    : exec_(exec), plan_(*exec.plan), graph_(*exec.plan->graph), initial_(initial), kernels_(kernels),
      producer_(ir::producers(graph_)), data_(exec.buffers.size()), state_(exec.buffers.size(), BufferState::unwritten),
      pc_(static_cast<std::size_t>(exec.num_devices), 0), computed_(plan_.sub_ops.size(), 0) {
  run_.pieces.resize(graph_.tensors.size());
}

std::string Machine::at(int d) const {
  if (done(d)) return fmt::format("device {} (finished)", d);
  return fmt::format("device {} instruction {} ({})", d, pc(d), exec::instruction_to_text(exec_, current(d)));
}

std::string Machine::buffer_name(exec::BufferId id) const { return "buffer " + exec::buffer_to_text(exec_, id); }

// Devices run in index order, each as far as it can; the order is fixed, so runs are deterministic
// (the pieces of replicas, and so which replica assembly reads first, do not depend on timing).
Expected<ExecRun> Machine::run() {
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < exec_.num_devices; ++d)
      while (!done(d)) {
        LOOM_ASSIGN_OR_RETURN(Progress p, with_context(step(d), at(d)));
        if (p == Progress::blocked) break;
        progress = true;
      }
  }
  for (int d = 0; d < exec_.num_devices; ++d)
    if (!done(d)) return std::unexpected(deadlock());
  LOOM_RETURN_IF_ERROR(check_finished());
  LOOM_ASSIGN_OR_RETURN(run_.values, assemble_values(graph_, initial_, run_.pieces));
  run_.held = std::move(data_);  // freed buffers were emptied
  return std::move(run_);
}

std::string Machine::waits_for(int d) const {
  if (const auto* r = std::get_if<exec::Recv>(&current(d))) return fmt::format("a send from device {} with tag {}", r->peer, r->tag);
  if (const auto* w = std::get_if<exec::CollectiveWait>(&current(d))) {
    const Started& s = started_.at(w->tag);  // blocked waits are of started tags
    std::vector<std::string> absent;
    for (int m : s.first->group)
      if (!s.members.contains(m)) absent.push_back(at(m));
    if (absent.empty()) return fmt::format("#{}'s chained inputs, whose starts never complete", w->tag);
    return fmt::format("the other members to start #{}, but {}", w->tag, join(absent, ", "));
  }
  const auto& c = std::get<exec::Collective>(current(d));  // only recvs, collectives and waits block
  std::vector<std::string> absent;  // the group was checked when the device blocked on it
  for (int m : c.group) {
    const auto* other = done(m) ? nullptr : std::get_if<exec::Collective>(&current(m));
    if (other == nullptr || other->tag != c.tag) absent.push_back(at(m));
  }
  return fmt::format("the other members, but {}", join(absent, ", "));
}

Error Machine::deadlock() const {
  std::vector<std::string> blocked;
  for (int d = 0; d < exec_.num_devices; ++d)
    if (!done(d)) blocked.push_back(fmt::format("{} waits for {}", at(d), waits_for(d)));
  return Error{fmt::format("the exec plan deadlocks: {}", join(blocked, "; ")),
               "a recv needs its send earlier in the sender's program, and a group's collectives must come in the same order "
               "on every member"};
}

Expected<void> Machine::check_finished() const {
  if (!mailbox_.empty()) {
    const auto& [key, messages] = *mailbox_.begin();
    const auto& [sender, receiver, tag] = key;
    return fail(fmt::format("device {} sends {} to device {} with tag {} (instruction {}), which no recv takes", sender,
                            exec::piece_to_text(exec_, messages.front().piece.tensor), receiver, tag, messages.front().instruction),
                "every send needs a recv with the same pair of devices and tag");
  }
  for (const plan::SubOp& s : plan_.sub_ops)
    if (s.live && computed_[s.id.index()] == 0)
      return fail(fmt::format("sub-op '{}' (device {}) is never computed", s.name, s.device),
                  "every live sub-op of the plan needs one compute instruction on its device");
  return {};
}

}  // namespace detail

Expected<ExecRun> run_exec_plan(const exec::ExecPlan& exec, const std::vector<NdArray>& initial, const KernelRegistry& kernels) {
  if (exec.plan == nullptr || exec.plan->graph == nullptr) return fail("the exec plan has no plan or graph");
  if (exec.num_devices < 1 || exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return failf("the exec plan has {} programs for {} devices", exec.programs.size(), exec.num_devices);
  return detail::Machine(exec, initial, kernels).run();
}

}  // namespace loom::verify
