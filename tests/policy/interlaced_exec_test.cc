// The interlaced pipeline's materialized programs (policy/interlaced.h, exec/materialize.h): where each
// device issues the communication of the shared blocks (the lookups' E, the head's H), which the plan's
// order makes barriers of every device of a replica.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/policy/stages.h"
#include "policy_test_support.h"

namespace loom::policy {
namespace {

using testing::deep;

bool staged(std::string_view op_name) {
  return op_name.starts_with("encoder.layers.") || op_name.starts_with("decoder.layers.");
}

// The ops interlaced spreads over every device (policy/interlaced.h: the lookups of the tied table, the
// head and the loss after it), forward or backward; not the last stage's lm_head_scale before the head.
bool shared(std::string_view op_name) {
  return op_name == "lm_head" || op_name.starts_with("lm_head.") || op_name.starts_with("loss") || op_name.find("embed_tokens") != op_name.npos;
}

// Per device, the first collective or send that a shared block's compute feeds (through local steps and
// collectives on the device) and that the device issues only after a staged layer's compute which came
// later than that shared compute: the communication of a shared block issued after later blocks. Empty
// when there is none.
std::vector<std::string> late_shared_communication(const exec::ExecPlan& exec) {
  const plan::Plan& p = *exec.plan;
  std::vector<std::string> late;
  for (int d = 0; d < exec.num_devices; ++d) {
    const auto& program = exec.programs[static_cast<std::size_t>(d)];
    std::unordered_map<std::uint32_t, std::size_t> writer;  // buffer -> the instruction writing it here
    std::vector<std::optional<std::size_t>> source(program.size());  // the latest compute an instruction reads
    std::optional<std::size_t> last_staged;
    const auto latest_compute = [&](exec::BufferId b) -> std::optional<std::size_t> {
      const auto it = writer.find(b.value);
      if (it == writer.end()) return std::nullopt;
      if (std::holds_alternative<exec::Compute>(program[it->second])) return it->second;
      return source[it->second];
    };
    const auto later = [](std::optional<std::size_t> a, std::optional<std::size_t> b) {
      return !a ? b : !b ? a : std::optional<std::size_t>(std::max(*a, *b));
    };
    const std::size_t before = late.size();
    for (std::size_t i = 0; i < program.size() && late.size() == before; ++i) {
      const exec::Instruction& instruction = program[i];
      std::optional<std::size_t> fed;
      std::int64_t tag = -1;
      if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
        for (exec::BufferId b : c->outputs) writer[b.value] = i;
        if (staged(p.op_of(c->sub_op).name)) last_staged = i;
        continue;
      }
      if (const auto* l = std::get_if<exec::Local>(&instruction)) {
        for (exec::BufferId b : l->inputs) source[i] = later(source[i], latest_compute(b));
        writer[l->output.value] = i;
        continue;
      }
      if (const auto* c = std::get_if<exec::Collective>(&instruction)) {
        source[i] = fed = latest_compute(c->input);
        writer[c->output.value] = i;
        tag = c->tag;
      } else if (const auto* s = std::get_if<exec::Send>(&instruction)) {
        fed = latest_compute(s->buffer);
        tag = s->tag;
      } else if (const auto* r = std::get_if<exec::Recv>(&instruction)) {
        writer[r->buffer.value] = i;
        continue;
      } else {
        continue;
      }
      if (!fed || !shared(p.op_of(std::get<exec::Compute>(program[*fed]).sub_op).name)) continue;
      if (last_staged && *last_staged > *fed)
        late.push_back(fmt::format(
            "device {}: '{}' communicates {} of '{}' (#{}) after '{}'", d,
            p.sub_op(std::get<exec::Compute>(program[*fed]).sub_op).name,
            std::holds_alternative<exec::Send>(instruction) ? "a send" : "a collective",
            p.graph->tensor(exec.collectives[static_cast<std::size_t>(tag)].tensor).name, tag,
            p.sub_op(std::get<exec::Compute>(program[*last_staged]).sub_op).name));
    }
  }
  return late;
}

TEST(InterlacedExec, SharedBlocksCommunicateRightAfterTheirCompute) {
  // The head's input gradient is written by every device of the replica (the head is vocabulary-parallel
  // over all of them) and read by the last stage after it has recomputed its forward; a lookup's output
  // is written by every device and read by the first encoder and decoder stages, each micro-batch's at
  // its own forward. The sums must be issued where the order puts the shared block, right after its
  // compute, on every device: issued where the global order first reaches a reader, they came after the
  // blocks the other stages ran meanwhile (nnScaler Fig. 8, t5-21b: stage 2 issued micro-batch 1's head
  // all-reduce inside its next backward, 0.6 s after the barrier, and the last stage waited for it).
  const ir::Graph& graph = deep("t5-3.9b", 4);
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  for (const auto& [tp, pp] : {std::pair{1, 4}, std::pair{2, 2}, std::pair{2, 4}}) {
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " pp " << pp);
    ParallelConfig config{.tp = tp, .pp = pp, .micro_batches = 4, .recompute = Recompute::full};
    config.op_seconds = *flops;
    const auto planned = exec::testing::policy_plan(graph, "interlaced", config);
    ASSERT_NE(planned->exec.plan, nullptr);
    const std::vector<std::string> late = late_shared_communication(planned->exec);
    EXPECT_TRUE(late.empty()) << late.size() << " devices, first: " << (late.empty() ? "" : late.front());
  }
}

TEST(InterlacedExec, EarlySumsTrainAsOneDevice) {
  // The sums issued at their shared block change no value: with recomputation and tp, the plan trains as
  // one device does.
  const ir::Graph& graph = deep("t5-3.9b", 4);
  const auto flops = training_flops(graph, ops::builtin_ops());
  ASSERT_TRUE(flops);
  ParallelConfig config{.tp = 2, .pp = 2, .micro_batches = 4, .recompute = Recompute::full};
  config.op_seconds = *flops;
  testing::expect_exec_trains_as_one_device(graph, "interlaced", config);
}

}  // namespace
}  // namespace loom::policy
