// ZeRO (policy/zero.h) and gradient accumulation on shrunk presets, checked against the analytic
// numbers: every stage trains exactly as one device and closes its step; data parallelism moves
// 2(n-1)/n Psi bytes per device per step for the gradients (ring convention, Psi the gradient bytes), and
// ZeRO-1/2 as much; ZeRO-3 holds 16 Psi / n of model state with mixed-precision AdamW; the stages save
// model state in order; micro-batches' gradients are summed once per step (ZeRO-2 and 3: reduced per
// micro-batch into the partition, zero_micro_batches_test.cc).
#include "loom/policy/zero.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "testing/policy_plans.h"
#include "loom/cost/memory_model.h"
#include "loom/plan/residence.h"
#include "loom/verify/closed_step.h"
#include "loom/verify/exec_interpreter.h"
#include "loom/verify/graph_interpreter.h"

namespace loom::policy {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

// Per-device bytes moved by collectives on device `device`, times the group size n (ring convention of
// comm/step.h: an all-reduce moves 2(n-1)/n of its input, a reduce-scatter (n-1)/n of its input, an
// all-gather (n-1)/n of its output), by the role of the tensor moved. Scaled by n to stay exact.
std::map<ir::TensorRole, std::int64_t> scaled_traffic(const exec::ExecPlan& exec, int device, int n) {
  std::map<ir::TensorRole, std::int64_t> bytes;
  for (const exec::Instruction& i : exec.programs[static_cast<std::size_t>(device)]) {
    const auto* c = std::get_if<exec::Collective>(&i);
    if (c == nullptr) continue;
    EXPECT_EQ(static_cast<int>(c->group.size()), n);
    const std::int64_t in = exec.buffer(c->input).bytes, out = exec.buffer(c->output).bytes;
    const std::int64_t moved = c->kind == comm::Primitive::all_reduce   ? 2 * (n - 1) * in
                               : c->kind == comm::Primitive::all_gather ? (n - 1) * out
                                                                        : (n - 1) * in;
    bytes[exec.plan->graph->tensor(exec.buffer(c->input).piece.tensor).role] += moved;
  }
  return bytes;
}

// Psi: the bytes of every parameter the optimizer updates (its gradient has the same size and type).
std::int64_t psi(const ir::Graph& graph) {
  std::int64_t bytes = 0;
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter && plan::updated_version(graph, t.id).valid())
      bytes += t.bytes();
  return bytes;
}

// The number of ops other than optimizer steps that read `parameter` as data: ZeRO-3 gathers it for each.
int readers(const plan::Plan& plan, ir::TensorId parameter) {
  int count = 0;
  for (const ir::Op& op : plan.graph->ops) {
    if (op.pass == ir::Pass::optimizer) continue;
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (op.inputs[i] == parameter && !plan.layouts[op.id.index()].shape_only(i)) {
        ++count;
        break;
      }
  }
  return count;
}

TEST(ZeroTraffic, DataParallelMovesTwiceTheGradientBytesPerDevice) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const std::int64_t gradient_bytes = psi(graph);
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    const auto p = policy_plan(graph, "dp", {.dp = n});
    for (int d = 0; d < n; ++d) {
      const auto traffic = scaled_traffic(p->exec, d, n);
      EXPECT_EQ(traffic.size(), 1u);  // gradients only
      EXPECT_EQ(traffic.at(ir::TensorRole::gradient), 2 * (n - 1) * gradient_bytes) << "device " << d;
    }
    std::printf("dp %d: %.1f bytes per device per step for Psi = %lld gradient bytes (2(n-1)/n Psi)\n", n,
                static_cast<double>(scaled_traffic(p->exec, 0, n).at(ir::TensorRole::gradient)) / n,
                static_cast<long long>(gradient_bytes));
  }
}

TEST(ZeroTraffic, StagesMoveWhatThePaperSays) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const std::int64_t gradient_bytes = psi(graph);
  const int n = 4;
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE(stage);
    const auto p = policy_plan(graph, "zero", {.dp = n, .zero = stage});
    ASSERT_TRUE(zero_notes(p->plan, {.dp = n, .zero = stage}).empty());  // every shrunk weight divides by 4
    // Gradients are reduce-scattered once: (n-1)/n Psi.
    const auto traffic = scaled_traffic(p->exec, 0, n);
    EXPECT_EQ(traffic.at(ir::TensorRole::gradient), (n - 1) * gradient_bytes);
    // Parameters: all-gathered once at the step's end (stages 1, 2), or for every op reading them (3).
    std::int64_t gathered = gradient_bytes;
    if (stage == 3) {
      gathered = 0;
      for (const ir::FullTensor& t : graph.tensors)
        if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter) gathered += t.bytes() * readers(p->plan, t.id);
      EXPECT_GE(gathered, 2 * gradient_bytes);  // forward and backward at least, as ZeRO-3's 1.5x
    }
    EXPECT_EQ(traffic.at(ir::TensorRole::parameter), (n - 1) * gathered);
    std::printf("zero-%d over %d: %.1f gradient + %.1f parameter bytes per device per step (Psi = %lld)\n", stage, n,
                static_cast<double>(traffic.at(ir::TensorRole::gradient)) / n,
                static_cast<double>(traffic.at(ir::TensorRole::parameter)) / n, static_cast<long long>(gradient_bytes));
  }
}

// Mixed precision (bf16 weights and gradients, fp32 master copy and moments): 16 bytes a parameter.
TEST(ZeroMemory, Stage3HoldsSixteenPsiOverN) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::bf16);
  std::int64_t parameters = 0;
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter) parameters += t.shape.numel();
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    const auto p = policy_plan(graph, "zero", {.dp = n, .zero = 3});
    const cost::MemoryReport report = cost::memory_usage(p->exec);
    for (const cost::DeviceMemory& d : report.devices) {
      EXPECT_EQ(d.model_state.total() * n, 16 * parameters) << "device " << d.device;
      EXPECT_EQ(d.model_state.parameter_bytes * n, 2 * parameters);
      EXPECT_EQ(d.model_state.gradient_bytes * n, 2 * parameters);
      EXPECT_EQ(d.model_state.optimizer_state_bytes * n, 12 * parameters);
    }
    std::printf("zero-3 over %d: model state %lld bytes per device = 16 x %lld parameters / %d\n", n,
                static_cast<long long>(report.devices[0].model_state.total()), static_cast<long long>(parameters), n);
  }
}

TEST(ZeroMemory, Stage3LeavesIndivisibleWeightsWhole) {
  // dp 3 divides the batch of 6 and every weight but the 16-wide norms and biases, which stay whole.
  auto forward = models::build_model("gpt3-125m", {.batch = 6, .dtype = ir::DType::bf16, .shrink = true});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  const ParallelConfig config{.dp = 3, .zero = 3};
  const auto p = policy_plan(*graph, "zero", config);
  std::int64_t parameters = 0, indivisible = 0;
  int whole = 0;
  for (const ir::FullTensor& t : graph->tensors) {
    if (!plan::persists(*graph, t.id) || t.role != ir::TensorRole::parameter) continue;
    parameters += t.shape.numel();
    bool divides = false;
    for (std::int64_t size : t.shape.dims) divides |= size % 3 == 0;
    if (!divides) {
      indivisible += t.shape.numel();
      ++whole;
    }
  }
  const std::vector<std::string> notes = zero_notes(p->plan, config);
  EXPECT_EQ(static_cast<int>(notes.size()), whole);
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes.front(), "'wte.weight' [64, 16]: no dimension of its shard [64, 16] divisible by dp 3; its optimizer "
                           "step and states stay replicated over dp");
  // Divisible weights hold a third of their 16 bytes a parameter, the others all of them.
  const cost::MemoryReport report = cost::memory_usage(p->exec);
  for (const cost::DeviceMemory& d : report.devices)
    EXPECT_EQ(d.model_state.total() * 3, 16 * (parameters - indivisible) + 3 * 16 * indivisible) << "device " << d.device;
}

// The full-size GPT-3 125M (12 layers, h 768) on 8 ranks: every weight has a dimension 8 divides (768).
TEST(ZeroMemory, FullSizeStage3HoldsSixteenPsiOverN) {
  auto forward = models::build_model("gpt3-125m", {.batch = 8, .seq = 128, .dtype = ir::DType::bf16});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  const ParallelConfig config{.dp = 8, .zero = 3};
  const auto p = policy_plan(*graph, "zero", config);
  EXPECT_TRUE(zero_notes(p->plan, config).empty());
  std::int64_t parameters = 0;
  for (const ir::FullTensor& t : graph->tensors)
    if (plan::persists(*graph, t.id) && t.role == ir::TensorRole::parameter) parameters += t.shape.numel();
  const cost::MemoryReport report = cost::memory_usage(p->exec);
  const double expected = 16.0 * static_cast<double>(parameters) / 8;
  for (const cost::DeviceMemory& d : report.devices)
    EXPECT_LT(std::abs(static_cast<double>(d.model_state.total()) / expected - 1), 0.01) << "device " << d.device;
  std::printf("full-size gpt3-125m, zero-3 over 8: model state %.1f MiB per device, 16 Psi / 8 = %.1f MiB (Psi = %lld "
              "parameters)\n",
              static_cast<double>(report.devices[0].model_state.total()) / (1 << 20), expected / (1 << 20),
              static_cast<long long>(parameters));
}

TEST(ZeroMemory, StagesSaveModelStateInOrder) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::bf16);
  std::int64_t parameters = 0;
  for (const ir::FullTensor& t : graph.tensors)
    if (plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter) parameters += t.shape.numel();
  const int n = 4;
  std::vector<cost::ModelState> states;
  std::vector<std::int64_t> peaks;
  for (int stage : {0, 1, 2, 3}) {
    const auto p = stage == 0 ? policy_plan(graph, "dp", {.dp = n}) : policy_plan(graph, "zero", {.dp = n, .zero = stage});
    const cost::MemoryReport report = cost::memory_usage(p->exec);
    states.push_back(report.devices[0].model_state);
    peaks.push_back(report.devices[0].peak_bytes);
    std::printf("stage %d over %d: model state %lld (parameters %lld, gradients %lld, optimizer states %lld), peak %lld\n",
                stage, n, static_cast<long long>(states.back().total()), static_cast<long long>(states.back().parameter_bytes),
                static_cast<long long>(states.back().gradient_bytes),
                static_cast<long long>(states.back().optimizer_state_bytes), static_cast<long long>(peaks.back()));
  }
  // Rajbhandari et al. 2020, Figure 1: (2 + 2 + 12) Psi, (2 + 2 + 12 / n) Psi, (2 + 14 / n) Psi, 16 Psi / n.
  EXPECT_EQ(states[0].total(), 16 * parameters);
  EXPECT_EQ(states[1].total() * n, (4 * n + 12) * parameters);
  EXPECT_EQ(states[2].total() * n, (2 * n + 14) * parameters);
  EXPECT_EQ(states[3].total() * n, 16 * parameters);
  for (std::size_t s = 1; s < states.size(); ++s) EXPECT_LT(states[s].total(), states[s - 1].total()) << "stage " << s;
  EXPECT_LT(peaks[3], peaks[1]);
  EXPECT_LE(peaks[2], peaks[1]);
}

TEST(ZeroSchedule, Stage2ReducesGradientsDuringBackwardStage1AtTheSteps) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  for (int stage : {1, 2}) {
    SCOPED_TRACE(stage);
    const auto p = policy_plan(graph, "zero", {.dp = 2, .zero = stage});
    const auto& program = p->exec.programs[0];
    // The backward pass ends with the device's last compute outside the optimizer.
    std::size_t backward_end = 0, scatters = 0, during_backward = 0;
    for (std::size_t i = 0; i < program.size(); ++i)
      if (const auto* c = std::get_if<exec::Compute>(&program[i]);
          c != nullptr && p->plan.op_of(c->sub_op).pass != ir::Pass::optimizer)
        backward_end = i;
    for (std::size_t i = 0; i < program.size(); ++i)
      if (const auto* c = std::get_if<exec::Collective>(&program[i]); c != nullptr && c->kind == comm::Primitive::reduce_scatter) {
        ++scatters;
        during_backward += i < backward_end ? 1 : 0;
      }
    EXPECT_GT(scatters, 0u);
    if (stage == 1) EXPECT_EQ(during_backward, 0u);   // the full gradients wait for the steps
    else EXPECT_GE(during_backward, scatters - 2);    // all but what the last backward ops complete
  }
}

// The shrunk preset's training graph with AdamW (f32), its initial values and single-device run.
struct Reference {
  const ir::Graph* graph;
  std::vector<verify::NdArray> initial, values;
};
const Reference& reference(const std::string& preset) {
  static std::map<std::string, Reference> cache;
  if (auto it = cache.find(preset); it != cache.end()) return it->second;
  Reference r{&shrunk_training_graph(preset, ir::DType::f32), {}, {}};
  r.initial = verify::initial_values(*r.graph, 1);
  auto run = verify::run_graph(*r.graph, r.initial);
  EXPECT_TRUE(run) << run.error().to_string();
  if (run) r.values = std::move(*run);
  return cache.emplace(preset, std::move(r)).first->second;
}

// The policy's ExecPlan trains as one device does and ends the step where the next one starts.
void expect_exact_and_closed(const std::string& preset, std::string_view policy, const ParallelConfig& config) {
  SCOPED_TRACE(fmt::format("{} / {} dp {} tp {} micro-batches {} zero {}", preset, policy, config.dp, config.tp,
                           config.micro_batches, config.zero));
  const Reference& ref = reference(preset);
  ASSERT_FALSE(ref.values.empty());
  const auto p = policy_plan(*ref.graph, policy, config);
  ASSERT_NE(p->exec.plan, nullptr);
  auto run = verify::run_exec_plan(p->exec, ref.initial);
  ASSERT_TRUE(run) << run.error().to_string();
  auto cmp = verify::compare_runs(*ref.graph, ref.values, run->values);
  ASSERT_TRUE(cmp) << cmp.error().to_string();
  EXPECT_LT(cmp->overall.max_rel, 1e-9) << cmp->overall.worst;
  auto closed = verify::check_closed_step(p->exec, *run, ref.values);
  ASSERT_TRUE(closed) << closed.error().to_string();
  EXPECT_GT(closed->pieces, 0u);
  EXPECT_LT(closed->error.max_rel, 1e-9) << closed->error.worst;
}

TEST(ZeroExact, EveryStageOfEveryFamilyTrainsAsOneDevice) {
  for (const std::string preset : {"gpt3-125m", "llama3-8b", "t5-3.9b"})
    for (int stage : {1, 2, 3}) expect_exact_and_closed(preset, "zero", {.dp = 2, .zero = stage});
}

TEST(ZeroExact, InsideMegatronsDataParallelRanks) {
  for (int stage : {1, 3}) expect_exact_and_closed("gpt3-125m", "megatron", {.dp = 2, .tp = 2, .zero = stage});
  expect_exact_and_closed("llama3-8b", "megatron", {.dp = 2, .tp = 2, .zero = 3});
}

// The parameters whose final gradient is written as value parts of `parts` (micro-batches x dp), and
// their bytes.
std::pair<int, std::int64_t> written_per_micro_batch(const plan::Plan& plan, int parts) {
  const ir::Graph& graph = *plan.graph;
  int count = 0;
  std::int64_t bytes = 0;
  for (const ir::FullTensor& t : graph.tensors) {
    if (!plan::persists(graph, t.id) || t.role != ir::TensorRole::parameter) continue;
    const ir::TensorId gradient = plan::final_gradient(graph, t.id);
    const bool split = std::ranges::any_of(plan.sub_ops, [&](const plan::SubOp& s) {
      return s.live && std::ranges::any_of(s.outputs, [&](const plan::SubTensor& out) {
               return out.tensor == gradient && out.value.count == parts;
             });
    });
    count += split ? 1 : 0;
    bytes += split ? t.bytes() : 0;
  }
  return {count, bytes};
}

// Data parallelism and ZeRO-1 sum the micro-batches' partial gradients on each device and reduce once a
// step; ZeRO-2 (and 3) reduce-scatter each micro-batch's into the partition, as DeepSpeed does, so that no
// device holds a whole gradient (zero_micro_batches_test.cc).
TEST(GradientAccumulation, MicroBatchesAreSummedOnceAStepUnlessPartitioned) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const std::int64_t gradient_bytes = psi(graph);
  int parameters = 0;
  for (const ir::FullTensor& t : graph.tensors)
    parameters += plan::persists(graph, t.id) && t.role == ir::TensorRole::parameter ? 1 : 0;
  for (int stage : {0, 1, 2}) {
    SCOPED_TRACE(stage);
    const ParallelConfig config{.dp = 2, .micro_batches = 2, .zero = stage};
    const auto p = policy_plan(graph, stage == 0 ? "dp" : "zero", config);
    // Per parameter one reduction a step (of the bytes of one micro-batch), or under ZeRO-2 one a
    // micro-batch for each gradient the micro-batches write in parts (all but the position table's,
    // read once a step outside the micro-batches).
    const std::string reduction(stage == 0 ? "all-reduce" : "reduce-scatter");
    const auto [split, split_bytes] = written_per_micro_batch(p->plan, config.micro_batches * config.dp);
    EXPECT_GT(split, parameters / 2);
    const int extra = stage == 2 ? config.micro_batches - 1 : 0;
    EXPECT_EQ(p->materialize_stats.collectives.at(reduction), parameters + extra * split);
    const auto traffic = scaled_traffic(p->exec, 0, 2);
    EXPECT_EQ(traffic.at(ir::TensorRole::gradient),
              stage == 0 ? 2 * gradient_bytes : gradient_bytes + extra * split_bytes);
    expect_exact_and_closed("gpt3-125m", stage == 0 ? "dp" : "zero", config);
  }
  // One device, two micro-batches: the partial sums are added locally, nothing moves.
  const auto single = policy_plan(graph, "megatron", {.micro_batches = 2});
  EXPECT_TRUE(single->materialize_stats.collectives.empty());
  EXPECT_EQ(single->materialize_stats.sends, 0);
  expect_exact_and_closed("gpt3-125m", "megatron", {.micro_batches = 2});
}

// The most buffers of `tensor` live at once on `device`.
int most_live(const exec::ExecPlan& exec, int device, std::string_view tensor) {
  int live = 0, most = 0;
  for (const exec::Instruction& i : exec.programs[static_cast<std::size_t>(device)]) {
    const auto of_tensor = [&](exec::BufferId b) { return exec.plan->graph->tensor(exec.buffer(b).piece.tensor).name == tensor; };
    if (const auto* f = std::get_if<exec::Free>(&i)) live -= of_tensor(f->buffer) ? 1 : 0;
    if (const auto* c = std::get_if<exec::Compute>(&i))
      for (exec::BufferId b : c->outputs) live += of_tensor(b) ? 1 : 0;
    if (const auto* l = std::get_if<exec::Local>(&i)) live += of_tensor(l->output) ? 1 : 0;
    if (const auto* c = std::get_if<exec::Collective>(&i)) live += of_tensor(c->output) ? 1 : 0;
    most = std::max(most, live);
  }
  return most;
}

TEST(GradientAccumulation, PartialSumsAreAddedAsTheMicroBatchesGo) {
  for (int micro_batches : {8, 3}) {
    SCOPED_TRACE(micro_batches);
    auto forward = models::build_model("gpt3-125m", {.batch = 2 * micro_batches, .dtype = ir::DType::f32, .shrink = true});
    ASSERT_TRUE(forward) << forward.error().to_string();
    auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
    ASSERT_TRUE(graph) << graph.error().to_string();
    const auto p = policy_plan(*graph, "dp", {.dp = 2, .micro_batches = micro_batches});
    EXPECT_EQ(p->materialize_stats.sends, 0);
    // One running sum: it and the newest partial sum are alive, and their sum while it is written, not
    // all the micro-batches' partial sums and their sum (9 for eight, 4 for three).
    EXPECT_EQ(most_live(p->exec, 0, "layers.0.mlp.fc1.weight.grad"), 3);
    auto initial = verify::initial_values(*graph, 1);
    auto reference = verify::run_graph(*graph, initial);
    ASSERT_TRUE(reference) << reference.error().to_string();
    auto run = verify::run_exec_plan(p->exec, initial);
    ASSERT_TRUE(run) << run.error().to_string();
    auto cmp = verify::compare_runs(*graph, *reference, run->values);
    ASSERT_TRUE(cmp);
    EXPECT_LT(cmp->overall.max_rel, 1e-9) << cmp->overall.worst;
  }
}

TEST(ZeroErrors, StagesAndPoliciesAreChecked) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const auto error_of = [&](std::string_view policy, const ParallelConfig& config) {
    auto made = plan::make_plan(graph, ops::builtin_ops());
    EXPECT_TRUE(made);
    auto applied = apply_policy(*made, policy, config);
    EXPECT_FALSE(applied) << policy;
    return applied ? std::string() : applied.error().to_string();
  };
  EXPECT_NE(error_of("zero", {.dp = 2}).find("needs a ZeRO stage"), std::string::npos);
  EXPECT_NE(error_of("zero", {.dp = 2, .zero = 4}).find("ZeRO stage 4 does not exist"), std::string::npos);
  EXPECT_NE(error_of("dp", {.dp = 2, .zero = 1}).find("policy 'dp' does not use ZeRO"), std::string::npos);
  EXPECT_NE(error_of("zero", {.dp = 2, .tp = 2, .zero = 1}).find("does not use tp"), std::string::npos);
}

}  // namespace
}  // namespace loom::policy
