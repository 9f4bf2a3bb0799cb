// Materialization's choices on the MLP fixture: data parallelism all-reduces the weight gradients,
// Megatron column/row splits all-reduce the row-parallel output, and the fallback works everywhere.
// The numbers these programs compute are checked by the exec interpreter (tests/verify).
#include "loom/exec/materialize.h"

#include <gtest/gtest.h>

#include <set>

#include <fmt/ranges.h>

#include "../plan/plan_test_graph.h"
#include "loom/cluster/presets.h"
#include "loom/exec/exec_json.h"
#include "loom/plan/batch.h"
#include "loom/plan/validate.h"

namespace loom::exec {
namespace {

using plan::Plan;
using plan::SubOpId;
using plan::testing::graph;

// Splits every forward op with a batch identifier into `n` parts on devices 0..n-1 and replicates the
// rest (optimizer steps, batch-less ops) on every device.
Plan data_parallel(int n) {
  Plan p = plan::testing::fresh_plan();
  const auto batch = plan::batch_identifiers(p);
  for (const ir::Op& op : graph().ops) {
    if (op.is_mirror()) continue;
    const SubOpId whole = p.parts[op.id.index()].front();
    const plan::TransAlgo algo = batch[op.id.index()] ? plan::TransAlgo{plan::SplitAlgo{*batch[op.id.index()]}}
                                                      : plan::TransAlgo{plan::ReplicateAlgo{}};
    auto parts = plan::trans(p, whole, algo, n);
    EXPECT_TRUE(parts) << op.name << ": " << parts.error().to_string();
    for (int k = 0; k < n; ++k) EXPECT_TRUE(plan::assign(p, (*parts)[static_cast<std::size_t>(k)], k));
  }
  return p;
}

// Tiny test tensors: price by bandwidth alone so the search picks what full-size tensors would get.
MaterializeOptions sized_like_real() {
  auto cluster = cluster::make_cluster("dgx-a100");
  EXPECT_TRUE(cluster);
  MaterializeOptions options;
  options.cost_model = bandwidth_only_cost(*cluster);
  return options;
}

int count_collectives(const ExecPlan& exec, comm::Primitive kind) {
  int count = 0;
  for (const auto& program : exec.programs)
    for (const Instruction& i : program)
      if (const auto* c = std::get_if<Collective>(&i); c != nullptr && c->kind == kind) ++count;
  return count;
}

TEST(MaterializeTest, DataParallelAllReducesEveryWeightGradient) {
  const Plan p = data_parallel(4);
  auto m = materialize(p, 4, sized_like_real());
  ASSERT_TRUE(m) << m.error().to_string();
  // Four weight/bias gradients, each one all-reduce over the 4 devices (4 member instructions each).
  EXPECT_EQ(m->stats.collectives["all-reduce"], 4);
  EXPECT_EQ(count_collectives(m->exec, comm::Primitive::all_reduce), 16);
  EXPECT_EQ(m->stats.sends, 0);
  for (const auto& program : m->exec.programs)
    for (const Instruction& i : program)
      if (const auto* c = std::get_if<Collective>(&i)) {
        EXPECT_EQ(c->group, (std::vector<int>{0, 1, 2, 3}));
        EXPECT_TRUE(m->exec.buffer(c->output).piece.value.is_whole());
      }
}

TEST(MaterializeTest, LatencyMakesTinyTransitionsPlainSends) {
  // Under α-β with real latencies, 512-byte gradients are cheaper as three receives than as a ring.
  auto m = materialize(data_parallel(4), 4);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_TRUE(m->stats.collectives.empty());
  EXPECT_EQ(m->stats.transitions_searched, 4);
}

TEST(MaterializeTest, FallbackOnlyUsesSendsAndCombines) {
  const Plan p = data_parallel(2);
  MaterializeOptions options;
  options.use_layout_search = false;
  auto m = materialize(p, 2, options);
  ASSERT_TRUE(m) << m.error().to_string();
  EXPECT_TRUE(m->stats.collectives.empty());
  EXPECT_GT(m->stats.sends, 0);
  EXPECT_GT(m->stats.fallback_fetches, 0);
}

TEST(MaterializeTest, TensorParallelMlpAllReducesTheRowParallelOutput) {
  Plan p = plan::testing::fresh_plan();
  // fc1 column-parallel (its output features), gelu alike, fc2 row-parallel (its reduction).
  const auto split = [&](std::string_view name, bool output_dim) {
    const SubOpId whole = plan::testing::only_part(p, name);
    const auto id = plan::dim_identifier(p, whole, output_dim, 0, 1);
    ASSERT_TRUE(id.has_value()) << name;
    auto parts = plan::trans(p, whole, plan::SplitAlgo{*id}, 2);
    ASSERT_TRUE(parts) << parts.error().to_string();
    for (int k = 0; k < 2; ++k) ASSERT_TRUE(plan::assign(p, (*parts)[static_cast<std::size_t>(k)], k));
  };
  split("fc1", true);
  split("act", true);
  split("fc2", false);
  for (SubOpId id : p.live_sub_ops())
    if (p.sub_op(id).device == plan::kUnassigned && !p.op_of(id).is_mirror()) {
      auto parts = plan::trans(p, id, plan::ReplicateAlgo{}, 2);
      ASSERT_TRUE(parts);
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(plan::assign(p, (*parts)[static_cast<std::size_t>(k)], k));
    }
  auto m = materialize(p, 2, sized_like_real());
  ASSERT_TRUE(m) << m.error().to_string();
  // fc2's partial logits are all-reduced for the replicated loss; the replicated optimizer steps gather
  // the split weight gradients (fc1's rows and bias, fc2's columns).
  std::set<std::string> reduced, gathered;
  for (const auto& program : m->exec.programs)
    for (const Instruction& i : program)
      if (const auto* c = std::get_if<Collective>(&i)) {
        const std::string& tensor = graph().tensor(m->exec.collectives[static_cast<std::size_t>(c->tag)].tensor).name;
        (c->kind == comm::Primitive::all_reduce ? reduced : gathered).insert(tensor);
      }
  EXPECT_TRUE(reduced.contains("fc2")) << fmt::format("all-reduced: {}", fmt::join(reduced, ", "));
  EXPECT_EQ(gathered, (std::set<std::string>{"fc1.bias.grad", "fc1.weight.grad", "fc2.weight.grad"}));
}

// The process's shared transitions (comm::SharedTransitionCache) answer a later materialization's searches:
// the same programs, bytes for bytes, as searching them itself, and the same per-call statistics.
TEST(MaterializeTest, SharedTransitionsGiveTheProgramsOfOwnSearches) {
  for (int n : {2, 4}) {  // the fixture's batch is 4
    const Plan p = data_parallel(n);
    MaterializeOptions own = sized_like_real();
    own.share_transitions = false;
    const auto alone = materialize(p, n, own);
    ASSERT_TRUE(alone) << alone.error().to_string();
    for (int round = 0; round < 2; ++round) {  // the first may search, the second is answered by the first
      const auto shared = materialize(p, n, sized_like_real());
      ASSERT_TRUE(shared) << shared.error().to_string();
      EXPECT_EQ(exec_to_json(shared->exec), exec_to_json(alone->exec)) << n << " devices, round " << round;
      EXPECT_EQ(shared->stats.distinct_searches, alone->stats.distinct_searches);
      EXPECT_EQ(shared->stats.transitions_searched, alone->stats.transitions_searched);
    }
  }
}

TEST(MaterializeTest, RejectsAnInvalidPlan) {
  Plan p = plan::testing::fresh_plan();  // nothing assigned
  auto m = materialize(p, 1);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().to_string().find("on no device"), std::string::npos) << m.error().to_string();
}

TEST(MaterializeTest, RejectsAClusterTooSmall) {
  const Plan p = data_parallel(4);
  MaterializeOptions options;
  auto small = cluster::make_cluster("rtx3090");
  ASSERT_TRUE(small);
  small->gpus_per_node = 2;
  options.cluster = *small;
  auto m = materialize(p, 4, options);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().to_string().find("has 2"), std::string::npos) << m.error().to_string();
}

}  // namespace
}  // namespace loom::exec
