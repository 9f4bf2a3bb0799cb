// Megatron's sequence-parallel pattern on the MLP fixture: the activation is split along the batch on two
// devices and fc2 is replicated, so the forward all-gathers the activation and the backward
// reduce-scatters its gradient. Materialization must pair the two (DESIGN.md: all-gather <->
// reduce-scatter) and the program must still train exactly as one device.
#include <gtest/gtest.h>

#include "../plan/plan_test_graph.h"
#include "loom/cluster/presets.h"
#include "loom/exec/autograd_pairs.h"
#include "loom/exec/check.h"
#include "loom/exec/materialize.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::verify {
namespace {

using plan::Plan;
using plan::SubOpId;
using plan::testing::graph;

Plan sequence_parallel_mlp() {
  Plan p = plan::testing::fresh_plan();
  const auto place = [&](std::string_view name, const plan::TransAlgo& algo) {
    auto parts = plan::trans(p, plan::testing::only_part(p, name), algo, 2);
    ASSERT_TRUE(parts) << name << ": " << parts.error().to_string();
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(plan::assign(p, (*parts)[static_cast<std::size_t>(k)], k));
  };
  place("fc1", plan::SplitAlgo{"*0"});
  place("act", plan::SplitAlgo{"*0"});
  for (const ir::Op& op : graph().ops)
    if (!op.is_mirror() && op.name != "fc1" && op.name != "act") place(op.name, plan::ReplicateAlgo{});
  return p;
}

TEST(AutogradPairs, AllGatherOfTheActivationPairsWithTheReduceScatterOfItsGradient) {
  const Plan p = sequence_parallel_mlp();
  exec::MaterializeOptions options;
  options.cost_model = exec::bandwidth_only_cost(cluster::make_cluster("dgx-a100").value());
  auto m = exec::materialize(p, 2, options);
  ASSERT_TRUE(m) << m.error().to_string();
  ASSERT_TRUE(exec::check_exec_plan(m->exec));

  const auto tag_of = [&](comm::Primitive kind, std::string_view tensor) -> std::int64_t {
    for (const auto& program : m->exec.programs)
      for (const exec::Instruction& i : program)
        if (const auto* c = std::get_if<exec::Collective>(&i);
            c != nullptr && c->kind == kind && graph().tensor(m->exec.collectives[static_cast<std::size_t>(c->tag)].tensor).name == tensor)
          return c->tag;
    return -1;
  };
  const std::int64_t gather = tag_of(comm::Primitive::all_gather, "act");
  const std::int64_t scatter = tag_of(comm::Primitive::reduce_scatter, "act.grad");
  ASSERT_GE(gather, 0);
  ASSERT_GE(scatter, 0);
  EXPECT_EQ(m->exec.collectives[static_cast<std::size_t>(gather)].paired, scatter);
  EXPECT_EQ(m->exec.collectives[static_cast<std::size_t>(scatter)].paired, gather);
  EXPECT_GE(m->stats.autograd_pairs, 1);

  const std::vector<NdArray> initial = initial_values(graph(), 7);
  auto reference = run_graph(graph(), initial);
  ASSERT_TRUE(reference) << reference.error().to_string();
  auto run = run_exec_plan(m->exec, initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto cmp = compare_runs(graph(), *reference, run->values);
  ASSERT_TRUE(cmp) << cmp.error().to_string();
  EXPECT_LE(cmp->overall.max_rel, 1e-9) << cmp->overall.worst;
}

TEST(AutogradPairs, AdjointKinds) {
  EXPECT_EQ(exec::adjoint(comm::Primitive::all_gather), comm::Primitive::reduce_scatter);
  EXPECT_EQ(exec::adjoint(comm::Primitive::reduce_scatter), comm::Primitive::all_gather);
  EXPECT_EQ(exec::adjoint(comm::Primitive::all_to_all), comm::Primitive::all_to_all);
  EXPECT_FALSE(exec::adjoint(comm::Primitive::all_reduce).has_value());
}

}  // namespace
}  // namespace loom::verify
