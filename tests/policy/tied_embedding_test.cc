// A tied (shared) parameter under dp x tp (tied_gpt.h): the token table's gradient is the sum of the
// embedding's partial gradient (split along the vocabulary over tp) and the head's (whole on every tp
// rank). Megatron and DDP sum the two on each device and reduce the sum once; so must the plan: per step
// one all-reduce over the dp ranks of each tp rank's rows, no point-to-point transfer of any of the
// table's gradients, and the step trains as one device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "loom/exec/instruction_buffers.h"
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

// The most buffers of tensor `name` device `device` holds at once over its program.
int most_live(const exec::ExecPlan& exec, int device, std::string_view name) {
  std::set<std::uint32_t> live;
  std::size_t most = 0;
  for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(device)]) {
    exec::for_each_written(instruction, [&](exec::BufferId id) {
      if (exec.plan->graph->tensor(exec.buffer(id).piece.tensor).name == name) live.insert(id.value);
    });
    most = std::max(most, live.size());
    if (const auto* free = std::get_if<exec::Free>(&instruction)) live.erase(free->buffer.value);
  }
  return static_cast<int>(most);
}

// The devices running the parts of op `name`.
std::set<int> devices_of(const plan::Plan& plan, std::string_view name) {
  std::set<int> devices;
  for (const plan::SubOp& s : plan.sub_ops)
    if (s.live && plan.op_of(s.id).name == name) devices.insert(s.device);
  return devices;
}

// The device running the parts of op `name`.
int device_of(const plan::Plan& plan, std::string_view name) {
  for (const plan::SubOp& s : plan.sub_ops)
    if (s.live && plan.op_of(s.id).name == name) return s.device;
  return -1;
}

// Pipelined, the embedding's partial gradient (first stage) and the head's (last stage) are written
// once per micro-batch. Each stage adds its micro-batches' partial sums as they come (pairwise: at most
// log2(m) + 1 alive, one more while a sum is written), the head's sum crosses the pipeline once, and
// the two are added once. Summed per micro-batch instead, every micro-batch's partial sum stayed alive
// until the step's end (m of them on each stage) and the head's crossed the pipeline m times.
TEST(TiedEmbedding, PipelinedPartialGradientsAreSummedAsTheyComeAndCrossOnce) {
  const ir::Graph graph = testing::tied_gpt(true, {.batch = 16});
  for (const int micro_batches : {8, 16}) {
    SCOPED_TRACE(fmt::format("micro-batches {}", micro_batches));
    const ParallelConfig config{.pp = 2, .micro_batches = micro_batches};
    const auto p = policy_plan(graph, "megatron", config);
    ASSERT_EQ(p->stage, api::Stage::materialized);
    const int first = device_of(p->plan, "wte.backward");
    const int last = device_of(p->plan, "lm_head.backward");
    ASSERT_NE(first, last);
    const int bound = std::bit_width(static_cast<unsigned>(micro_batches)) + 1;  // log2(m) + 2
    EXPECT_LE(most_live(p->exec, first, "wte.weight.grad.1"), bound);
    EXPECT_LE(most_live(p->exec, last, "wte.weight.grad.0"), bound);
    EXPECT_EQ(table_gradient_traffic(p->exec, first).transfers, 1);
    EXPECT_EQ(table_gradient_traffic(p->exec, last).transfers, 1);
    testing::expect_exec_trains_as_one_device(graph, "megatron", config, 5);
  }
}

// The most bytes of the buffers of tensors named `prefix`... that device `device` holds at once, and the
// largest such buffer.
struct LiveBytes {
  std::int64_t most = 0;
  std::int64_t largest = 0;
};
LiveBytes live_bytes(const exec::ExecPlan& exec, int device, std::string_view prefix) {
  std::set<std::uint32_t> live;
  std::int64_t bytes = 0;
  LiveBytes result;
  for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(device)]) {
    exec::for_each_written(instruction, [&](exec::BufferId id) {
      const exec::Buffer& b = exec.buffer(id);
      if (!exec.plan->graph->tensor(b.piece.tensor).name.starts_with(prefix) || !live.insert(id.value).second) return;
      bytes += b.bytes;
      result.largest = std::max(result.largest, b.bytes);
    });
    result.most = std::max(result.most, bytes);
    if (const auto* free = std::get_if<exec::Free>(&instruction); free != nullptr && live.erase(free->buffer.value) != 0)
      bytes -= exec.buffer(free->buffer).bytes;
  }
  return result;
}

// With tp 2 the table's accumulation reads each tp rank's rows (of part r of dp): each device adds its
// micro-batches' partial gradients into one running sum as they come (exec/gradient_accumulation.h), the
// last stage's sum of the head's (written whole on every tp rank) is cut to the rows read and crosses the
// pipeline once, so the table's gradient bytes a device holds do not grow with the micro-batches: equal
// for 4 and 16 within one buffer. Split per micro-batch instead, every micro-batch's partial gradient
// stayed alive until the step's last backward (16 of them on the last stage), and each crossed alone.
TEST(TiedEmbedding, PipelinedTensorParallelPartialGradientsKeepOneRunningSum) {
  const ir::Graph graph = testing::tied_gpt(true, {.batch = 32});
  for (const int dp : {1, 2}) {
    std::map<int, LiveBytes> at_four;  // by device
    for (const int micro_batches : {4, 16}) {
      SCOPED_TRACE(fmt::format("dp {} micro-batches {}", dp, micro_batches));
      const ParallelConfig config{.dp = dp, .tp = 2, .pp = 2, .micro_batches = micro_batches};
      const auto p = policy_plan(graph, "megatron", config);
      ASSERT_EQ(p->stage, api::Stage::materialized);
      const std::set<int> first = devices_of(p->plan, "wte.backward");
      const std::set<int> last = devices_of(p->plan, "lm_head.backward");
      ASSERT_EQ(first.size(), static_cast<std::size_t>(dp * 2));
      ASSERT_EQ(last.size(), first.size());
      int sent = 0;
      for (int device = 0; device < device_count(config); ++device) {
        const LiveBytes live = live_bytes(p->exec, device, "wte.weight.grad");
        if (micro_batches == 4) {
          at_four[device] = live;
        } else {
          EXPECT_LE(std::abs(live.most - at_four.at(device).most), live.largest) << "device " << device;
        }
        const int transfers = table_gradient_traffic(p->exec, device).transfers;
        if (first.contains(device)) {
          EXPECT_EQ(transfers, 1) << "device " << device;  // its rows of the head's sum
        }
        if (last.contains(device)) sent += transfers;
      }
      EXPECT_EQ(sent, static_cast<int>(first.size()));
      testing::expect_exec_trains_as_one_device(graph, "megatron", config, 5);
    }
  }
}

}  // namespace
}  // namespace loom::policy
