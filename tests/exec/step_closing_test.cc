// Residence and step closing in materialization (plan/residence.h), on the MLP of plan_test_graph.h in
// data parallelism over two devices built with the primitives: the ExecPlan ends each step with every
// persistent piece it loads, ZeRO-style residences give the textbook collectives, and micro-batches'
// partial gradients are summed on each device before one reduction.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "../plan/plan_test_graph.h"
#include "loom/cluster/presets.h"
#include "loom/exec/check.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/materialize.h"
#include "loom/plan/batch.h"
#include "loom/plan/residence.h"

namespace loom::exec {
namespace {

using plan::Plan;
using plan::SubOpId;

ir::TensorId tensor_named(const ir::Graph& g, std::string_view name) {
  for (const ir::FullTensor& t : g.tensors)
    if (t.name == name) return t.id;
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// Forward ops split along their batch `micro_batches` ways and each part again two ways, part (k, r) on
// device r; other ops replicated on both devices, except optimizer steps split in two along their
// parameter's dimension 0 when `shard_steps` (ZeRO's partition), step part r on device r.
Plan data_parallel_mlp(bool shard_steps, int micro_batches = 1) {
  Plan plan = plan::testing::fresh_plan();
  const auto batch = plan::batch_identifiers(plan);
  const auto split = [&](SubOpId id, const plan::TransAlgo& algo, int n) {
    auto parts = plan::trans(plan, id, algo, n);
    EXPECT_TRUE(parts) << parts.error().to_string();
    return parts.value_or(std::vector<SubOpId>{});
  };
  for (const ir::Op& op : plan.graph->ops) {
    if (op.is_mirror()) continue;
    const SubOpId whole = plan.parts[op.id.index()].front();
    std::vector<SubOpId> pieces{whole};
    plan::TransAlgo algo = plan::ReplicateAlgo{};
    if (batch[op.id.index()]) {
      algo = plan::SplitAlgo{*batch[op.id.index()]};
      if (micro_batches > 1) pieces = split(whole, algo, micro_batches);
    } else if (op.pass == ir::Pass::optimizer && shard_steps) {
      algo = plan::SplitAlgo{plan::dim_identifier(plan, whole, true, 0, 0).value_or("?")};
    }
    for (SubOpId piece : pieces) {
      const std::vector<SubOpId> parts = split(piece, algo, 2);
      for (int r = 0; r < static_cast<int>(parts.size()); ++r) EXPECT_TRUE(plan::assign(plan, parts[static_cast<std::size_t>(r)], r));
    }
  }
  return plan;
}

Materialized materialized(const Plan& plan) {
  MaterializeOptions options;
  auto cluster = cluster::make_cluster("dgx-a100");
  EXPECT_TRUE(cluster);
  if (cluster) options.cost_model = bandwidth_only_cost(*cluster);
  auto m = materialize(plan, 2, options);
  EXPECT_TRUE(m) << m.error().to_string();
  if (!m) return {};
  auto checked = check_exec_plan(m->exec);
  EXPECT_TRUE(checked) << checked.error().to_string();
  return std::move(*m);
}

// Structural closing: each piece of a tensor the step updates that a device loads, the device holds at
// the end as a never-freed buffer of the updated version. Returns the problems, one per line.
std::string unclosed(const ExecPlan& exec) {
  const ir::Graph& g = *exec.plan->graph;
  std::set<std::uint32_t> freed;
  for (const auto& program : exec.programs)
    for (const Instruction& i : program)
      if (const auto* f = std::get_if<Free>(&i)) freed.insert(f->buffer.value);
  std::string problems;
  for (int d = 0; d < exec.num_devices; ++d)
    for (const Instruction& i : exec.programs[static_cast<std::size_t>(d)]) {
      const auto* load = std::get_if<Load>(&i);
      if (load == nullptr) continue;
      const plan::SubTensor& loaded = exec.buffer(load->output).piece;
      const ir::TensorId next = plan::updated_version(g, loaded.tensor);
      if (!next.valid()) continue;
      bool found = false;
      for (std::size_t b = 0; b < exec.buffers.size(); ++b) {
        plan::SubTensor piece = exec.buffers[b].piece;
        if (exec.buffers[b].device != d || piece.tensor != next || freed.contains(static_cast<std::uint32_t>(b))) continue;
        piece.tensor = loaded.tensor;
        found |= piece.value.is_whole() && plan::same_piece(piece, loaded, false);
      }
      if (!found) problems += fmt::format("device {} loads {} but does not end with it\n", d, loaded.to_string());
    }
  return problems;
}

// Collectives by (primitive, tensor name), counted once per group instance.
std::map<std::pair<std::string, std::string>, int> collectives(const ExecPlan& exec) {
  std::map<std::pair<std::string, std::string>, int> count;
  std::set<std::int64_t> seen;
  for (const auto& program : exec.programs)
    for (const Instruction& i : program)
      if (const auto* c = std::get_if<Collective>(&i); c != nullptr && seen.insert(c->tag).second)
        ++count[{std::string(comm::name(c->kind)), exec.plan->graph->tensor(exec.buffer(c->input).piece.tensor).name}];
  return count;
}

// The index of the first instruction on `device` satisfying `pred`, or the program's size.
template <class Pred>
std::size_t first(const ExecPlan& exec, int device, Pred pred) {
  const auto& program = exec.programs[static_cast<std::size_t>(device)];
  for (std::size_t i = 0; i < program.size(); ++i)
    if (pred(program[i])) return i;
  return program.size();
}

bool is_step(const ExecPlan& exec, const Instruction& i) {
  const auto* c = std::get_if<Compute>(&i);
  return c != nullptr && exec.plan->op_of(c->sub_op).pass == ir::Pass::optimizer;
}

TEST(StepClosing, ReplicatedStepsCloseInPlace) {
  const Plan plan = data_parallel_mlp(false);
  const Materialized m = materialized(plan);
  EXPECT_EQ(unclosed(m.exec), "");
  for (const auto& [key, n] : collectives(m.exec))
    EXPECT_EQ(key.second.find(".updated"), std::string::npos) << key.first << " of " << key.second;
  EXPECT_EQ(m.stats.sends, 0);
}

TEST(StepClosing, ShardedStepsAllGatherTheUpdatedParametersOnce) {
  const Plan plan = data_parallel_mlp(true);
  const Materialized m = materialized(plan);
  EXPECT_EQ(unclosed(m.exec), "");
  const auto count = collectives(m.exec);
  for (const std::string name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    EXPECT_EQ(count.at({"all-gather", name + ".updated"}), 1) << name;
    EXPECT_EQ(count.at({"reduce-scatter", name + ".grad"}), 1) << name;  // the step reads its shard
  }
  EXPECT_FALSE(count.contains({"all-gather", "fc1.weight"}));  // parameters stay whole on both devices
  EXPECT_FALSE(count.contains({"all-gather", "fc1.weight.exp_avg.updated"}));  // states stay sharded
  // The optimizer's shard of the updated weight is freed once gathered; the gathered whole is kept.
  for (int d = 0; d < 2; ++d) {
    BufferId shard;
    std::set<std::uint32_t> freed;
    for (const Instruction& i : m.exec.programs[static_cast<std::size_t>(d)]) {
      if (const auto* f = std::get_if<Free>(&i)) freed.insert(f->buffer.value);
      if (const auto* c = std::get_if<Compute>(&i); c != nullptr && plan.sub_op(c->sub_op).name.starts_with("fc1.weight.adamw"))
        shard = c->outputs[0];
    }
    ASSERT_TRUE(shard.valid());
    EXPECT_TRUE(freed.contains(shard.value)) << exec_to_text(m.exec, d);
  }
  EXPECT_EQ(m.stats.sends, 0);
}

TEST(StepClosing, ShardedParametersAreGatheredForEachReadingOp) {
  Plan plan = data_parallel_mlp(true);
  const ir::Graph& g = *plan.graph;
  for (std::string_view name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    const ir::TensorId p = tensor_named(g, name);
    ASSERT_TRUE(plan::set_residence(plan, p, plan::Residence::optimizer_shards));
    ASSERT_TRUE(plan::set_residence(plan, plan::final_gradient(g, p), plan::Residence::optimizer_shards));
  }
  const Materialized m = materialized(plan);
  EXPECT_EQ(unclosed(m.exec), "");
  const auto count = collectives(m.exec);
  // Forward and backward gather fc2's weight separately (fc1's backward does not read fc1's weight: its
  // input gradient is not needed).
  EXPECT_EQ(count.at({"all-gather", "fc2.weight"}), 2);
  EXPECT_EQ(count.at({"reduce-scatter", "fc2.weight.grad"}), 1);
  for (const auto& [key, n] : count) EXPECT_EQ(key.second.find(".updated"), std::string::npos) << key.second;
  // Each device loads only its half of each parameter.
  for (const auto& program : m.exec.programs)
    for (const Instruction& i : program) {
      const auto* load = std::get_if<Load>(&i);
      if (load == nullptr) continue;
      const plan::SubTensor& piece = m.exec.buffer(load->output).piece;
      if (g.tensor(piece.tensor).role == ir::TensorRole::parameter) {
        EXPECT_EQ(piece.numel() * 2, g.tensor(piece.tensor).shape.numel()) << piece.to_string();
      }
    }
  // Resident gradients are reduced before the steps begin.
  for (int d = 0; d < 2; ++d) {
    const std::size_t scatter = first(m.exec, d, [](const Instruction& i) {
      return std::holds_alternative<Collective>(i) && std::get<Collective>(i).kind == comm::Primitive::reduce_scatter;
    });
    EXPECT_LT(scatter, first(m.exec, d, [&](const Instruction& i) { return is_step(m.exec, i); }));
  }
}

TEST(StepClosing, MicroBatchPartialSumsAreAddedBeforeOneAllReduce) {
  const Plan plan = data_parallel_mlp(false, 2);
  const Materialized m = materialized(plan);
  EXPECT_EQ(unclosed(m.exec), "");
  const auto count = collectives(m.exec);
  for (const std::string name : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    EXPECT_EQ(count.at({"all-reduce", name + ".grad"}), 1) << name;
  EXPECT_EQ(m.stats.sends, 0);
  // Each device combines its two micro-batches' partial sums of each weight gradient first.
  int combines = 0;
  for (const Instruction& i : m.exec.programs[0])
    if (const auto* l = std::get_if<Local>(&i); l != nullptr && l->kind == LocalKind::combine && l->inputs.size() == 2)
      ++combines;
  EXPECT_GE(combines, 4);
}

}  // namespace
}  // namespace loom::exec
