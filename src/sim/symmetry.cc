#include "loom/sim/symmetry.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "loom/exec/exec_text.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::sim {
namespace {

using exec::BufferId;
using exec::Instruction;

constexpr std::uint32_t kNotWritten = std::numeric_limits<std::uint32_t>::max();

// Durations compared bit for bit: the same model on equivalent inputs computes the same double, and a
// NaN (an error the simulation will report) never matches.
bool same_time(double a, double b) { return a == b; }

class Checker {
 public:
  Checker(const exec::ExecPlan& exec, const CommIndex& index, const Durations& durations)
      : exec_(exec), index_(index), durations_(durations), producer_(exec.buffers.size(), kNotWritten) {}

  std::string run() {
    if (exec_.class_of.empty()) return "the plan has no device classes";
    if (std::string why = check_classes(); !why.empty()) return why;
    record_producers();
    for (int d = 0; d < exec_.num_devices; ++d) {
      const int r = rep(d);
      if (r == d) continue;
      const auto& mine = program(d);
      const auto& theirs = program(r);
      if (mine.size() != theirs.size())
        return fmt::format("device {} runs {} instructions and its class representative {} runs {}", d, mine.size(), r,
                           theirs.size());
      for (std::uint32_t i = 0; i < mine.size(); ++i)
        if (std::string why = compare(d, r, i); !why.empty())
          return fmt::format("device {}'s instruction {} ({}) times differently from its class representative {}'s "
                             "({}): {}",
                             d, i, exec::instruction_to_text(exec_, mine[i]), r,
                             exec::instruction_to_text(exec_, theirs[i]), why);
    }
    return {};
  }

 private:
  const std::vector<Instruction>& program(int d) const { return exec_.programs[static_cast<std::size_t>(d)]; }
  int class_of(int d) const { return exec_.class_of[static_cast<std::size_t>(d)]; }
  int rep(int d) const { return exec_.representatives[static_cast<std::size_t>(class_of(d))]; }
  std::int64_t bytes(BufferId b) const { return b.index() < exec_.buffers.size() ? exec_.buffer(b).bytes : -1; }
  std::uint32_t producer(BufferId b) const { return b.index() < producer_.size() ? producer_[b.index()] : kNotWritten; }

  std::string check_classes() const {
    const auto devices = static_cast<std::size_t>(exec_.num_devices);
    if (exec_.class_of.size() != devices)
      return fmt::format("class_of has {} entries for {} devices", exec_.class_of.size(), devices);
    const int classes = static_cast<int>(exec_.representatives.size());
    for (int c = 0; c < classes; ++c) {
      const int r = exec_.representatives[static_cast<std::size_t>(c)];
      if (r < 0 || r >= exec_.num_devices || class_of(r) != c)
        return fmt::format("class {}'s representative {} is not a device of the class", c, r);
    }
    for (int d = 0; d < exec_.num_devices; ++d)
      if (class_of(d) < 0 || class_of(d) >= classes) return fmt::format("device {} has no class ({})", d, class_of(d));
    return {};
  }

  // Each buffer's writing instruction, by position in its device's program.
  void record_producers() {
    for (const auto& program : exec_.programs)
      for (std::uint32_t i = 0; i < program.size(); ++i)
        exec::for_each_written(program[i], [&](BufferId b) {
          if (b.index() < producer_.size()) producer_[b.index()] = i;
        });
  }

  // The same writers for two operand lists. Their sizes are what device classes compare (shapes): not
  // read again, as reading every buffer of every program would double the cost of the check.
  bool same_writers(std::span<const BufferId> a, std::span<const BufferId> b) const {
    if (a.size() != b.size()) return false;
    for (std::size_t k = 0; k < a.size(); ++k)
      if (a[k].valid() != b[k].valid() || producer(a[k]) != producer(b[k])) return false;
    return true;
  }

  std::string compare(int d, int r, std::uint32_t i) {
    const Instruction& x = program(d)[i];
    const Instruction& y = program(r)[i];
    if (x.index() != y.index()) return "a different kind of instruction";
    if (const auto* a = std::get_if<exec::Compute>(&x)) {
      const auto& b = std::get<exec::Compute>(y);
      const plan::Plan* plan = exec_.plan;
      const bool known = plan != nullptr && a->sub_op.index() < plan->sub_ops.size() && b.sub_op.index() < plan->sub_ops.size();
      if (!known || plan->sub_op(a->sub_op).op != plan->sub_op(b.sub_op).op) return "another op";
      if (!same_writers(a->inputs, b.inputs)) return "inputs written elsewhere";
    } else if (const auto* a = std::get_if<exec::Local>(&x)) {
      const auto& b = std::get<exec::Local>(y);
      if (a->kind != b.kind || !same_writers(a->inputs, b.inputs)) return "another local, or inputs written elsewhere";
    } else if (const auto a = exec::collective_call(x)) {
      const auto b = *exec::collective_call(y);
      if (a->kind != b.kind || a->group.size() != b.group.size() || !same_bytes(a->inputs, b.inputs) ||
          !same_bytes(a->outputs, b.outputs) || !same_writers(a->inputs, b.inputs))
        return "another collective, or buffers of other sizes or written elsewhere";
      // Who it waits for is checked on the simulated times (simulator_represented.cc): only its length here.
      const double mine = seconds(*a), theirs = seconds(b);
      if (!same_time(mine, theirs)) return fmt::format("it takes {} s, not {} s", mine, theirs);
    } else if (std::holds_alternative<exec::CollectiveWait>(x)) {
      // It waits for its start, compared where the start stands.
    } else if (const auto* a = std::get_if<exec::Send>(&x)) {
      const auto& b = std::get<exec::Send>(y);
      // A send waits for nothing remote: its peer's class does not matter, only its own time.
      if (bytes(a->buffer) != bytes(b.buffer) || producer(a->buffer) != producer(b.buffer))
        return "a buffer of another size or written elsewhere";
      const double mine = p2p(d, a->peer, bytes(a->buffer)), theirs = p2p(r, b.peer, bytes(b.buffer));
      if (!same_time(mine, theirs)) return fmt::format("it takes {} s, not {} s", mine, theirs);
    } else if (const auto* a = std::get_if<exec::Recv>(&x)) {
      const auto& b = std::get<exec::Recv>(y);
      // When its sender issues is checked on the simulated times (simulator_represented.cc): only its length here.
      if (bytes(a->buffer) != bytes(b.buffer)) return "a buffer of another size";
      if (!index_.send(a->peer, d, a->tag)) return "no matching send";
      const double mine = p2p(a->peer, d, bytes(a->buffer)), theirs = p2p(b.peer, r, bytes(b.buffer));
      if (!same_time(mine, theirs)) return fmt::format("it takes {} s, not {} s", mine, theirs);
    }
    return {};
  }

  double p2p(int src, int dst, std::int64_t bytes) const {
    return durations_.p2p ? durations_.p2p(src, dst, bytes) : std::numeric_limits<double>::quiet_NaN();
  }

  bool same_bytes(std::span<const BufferId> a, std::span<const BufferId> b) const {
    return std::ranges::equal(a, b, [&](BufferId x, BufferId y) { return bytes(x) == bytes(y); });
  }

  // A collective's (or start's) time, from its largest member input as the simulator prices it (a
  // start's inputs together); once per tag.
  double seconds(const exec::CollectiveCall& c) {
    auto [it, fresh] = seconds_.try_emplace(c.tag, 0.0);
    if (!fresh) return it->second;
    std::int64_t largest = 0;
    for (const Site& s : index_.collective(c.tag))
      if (const auto member = exec::collective_call(program(s.device)[s.instruction])) {
        std::int64_t sum = 0;
        for (BufferId in : member->inputs) sum += bytes(in);
        largest = std::max(largest, sum);
      }
    it->second = durations_.collective ? durations_.collective(priced_collective(c), largest)
                                       : std::numeric_limits<double>::quiet_NaN();
    return it->second;
  }

  const exec::ExecPlan& exec_;
  const CommIndex& index_;
  const Durations& durations_;
  std::vector<std::uint32_t> producer_;  // by buffer
  std::unordered_map<std::int64_t, double> seconds_;  // by tag
};

}  // namespace

std::string symmetry_violation(const exec::ExecPlan& exec, const CommIndex& index, const Durations& durations) {
  return Checker(exec, index, durations).run();
}

}  // namespace loom::sim
