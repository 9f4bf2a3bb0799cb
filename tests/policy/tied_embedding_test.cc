// A tied (shared) parameter under dp x tp (tied_gpt.h): the token table's gradient is the sum of the
// embedding's partial gradient (split along the vocabulary over tp) and the head's (whole on every tp
// rank). Megatron and DDP sum the two on each device and reduce the sum once; so must the plan: per step
// one all-reduce over the dp ranks of each tp rank's rows, no point-to-point transfer of any of the
// table's gradients, and the step trains as one device.
#include <gtest/gtest.h>

#include <string>

#include "policy_test_support.h"
#include "testing/tied_gpt.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;

struct TableGradientTraffic {
  int all_reduces = 0;
  int other_collectives = 0;
  int transfers = 0;  // sends and receives
};

// What device `device` does with "wte.weight.grad" and its partial gradients ("wte.weight.grad.0", ...).
TableGradientTraffic table_gradient_traffic(const exec::ExecPlan& exec, int device) {
  const ir::Graph& graph = *exec.plan->graph;
  const auto of_table = [&](exec::BufferId b) {
    return graph.tensor(exec.buffer(b).piece.tensor).name.starts_with("wte.weight.grad");
  };
  TableGradientTraffic t;
  for (const exec::Instruction& i : exec.programs[static_cast<std::size_t>(device)]) {
    if (const auto* c = std::get_if<exec::Collective>(&i); c != nullptr && of_table(c->input))
      (c->kind == comm::Primitive::all_reduce ? t.all_reduces : t.other_collectives) += 1;
    if (const auto* s = std::get_if<exec::Send>(&i); s != nullptr && of_table(s->buffer)) ++t.transfers;
    if (const auto* r = std::get_if<exec::Recv>(&i); r != nullptr && of_table(r->buffer)) ++t.transfers;
  }
  return t;
}

// The shape keeps the head replicated over tp (the point of the test): check that, so a change of the
// tensor-parallel layout cannot make the test vacuous.
TEST(TiedEmbedding, HeadStaysWholeWhileTheTableSplitsOverTp) {
  const ir::Graph graph = testing::tied_gpt(true);
  const auto p = policy_plan(graph, "megatron", {.dp = 2, .tp = 2});
  int heads = 0, embeddings = 0;
  for (const plan::SubOp& s : p->plan.sub_ops) {
    if (!s.live) continue;
    const std::string& op = p->plan.op_of(s.id).name;
    if (op == "lm_head.backward") {
      ++heads;
      EXPECT_EQ(s.outputs.back().local_shape()[0], 64) << s.name;  // the whole vocabulary's rows
    }
    if (op == "wte.backward") {
      ++embeddings;
      EXPECT_EQ(s.outputs.back().local_shape()[0], 32) << s.name;  // this tp rank's rows
    }
  }
  EXPECT_EQ(heads, 4);
  EXPECT_EQ(embeddings, 4);
}

TEST(TiedEmbedding, GradientIsSummedLocallyAndAllReducedOnce) {
  const ir::Graph graph = testing::tied_gpt(true);
  for (const ParallelConfig& config : {ParallelConfig{.dp = 2, .tp = 2}, ParallelConfig{.dp = 4, .tp = 2},
                                       ParallelConfig{.dp = 2, .tp = 2, .micro_batches = 2}}) {
    SCOPED_TRACE(fmt::format("dp {} tp {} micro-batches {}", config.dp, config.tp, config.micro_batches));
    const auto p = policy_plan(graph, "megatron", config);
    for (int d = 0; d < device_count(config); ++d) {
      const TableGradientTraffic t = table_gradient_traffic(p->exec, d);
      EXPECT_EQ(t.all_reduces, 1) << "device " << d;
      EXPECT_EQ(t.other_collectives, 0) << "device " << d;
      EXPECT_EQ(t.transfers, 0) << "device " << d;
    }
  }
}

TEST(TiedEmbedding, TrainsAsOneDevice) {
  const ir::Graph graph = testing::tied_gpt(true);
  for (const ParallelConfig& config : {ParallelConfig{.dp = 2, .tp = 2},
                                       ParallelConfig{.dp = 2, .tp = 2, .micro_batches = 2},
                                       ParallelConfig{.dp = 2, .tp = 2, .zero = 3}})
    testing::expect_exec_trains_as_one_device(graph, "megatron", config, 5);
}

}  // namespace
}  // namespace loom::policy
