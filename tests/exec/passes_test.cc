// The exec passes (exec/passes.h) on policies' plans: gradient all-reduces bucketed into starts and
// waits that every member issues alike, exchanges of value parts made all-reduces, ZeRO-3's parameter
// all-gathers prefetched ahead of their readers; the plans still check.
#include "loom/exec/passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "exec_test_plans.h"
#include "loom/exec/check.h"
#include "loom/exec/exec_text.h"
#include "loom/exec/instruction_buffers.h"
#include "testing/policy_plans.h"

namespace loom::exec {
namespace {

using testing::policy_plan;
using testing::shrunk_training_graph;

bool is_parameter_gradient(const ExecPlan& exec, BufferId b) {
  const ir::Graph& graph = *exec.plan->graph;
  const ir::FullTensor& t = graph.tensor(exec.buffer(b).piece.tensor);
  return t.role == ir::TensorRole::gradient && t.owner.valid() && graph.tensor(t.owner).role == ir::TensorRole::parameter;
}

// Per device: its blocking all-reduces of parameter gradients, and its other blocking collectives.
std::pair<std::size_t, std::size_t> blocking(const ExecPlan& exec, int d) {
  std::size_t gradients = 0, others = 0;
  for (const Instruction& in : exec.programs[static_cast<std::size_t>(d)])
    if (const auto* c = std::get_if<Collective>(&in)) {
      const bool gradient = c->kind == comm::Primitive::all_reduce && is_parameter_gradient(exec, c->output);
      gradients += gradient;
      others += !gradient;
    }
  return {gradients, others};
}

std::vector<std::pair<std::size_t, const CollectiveStart*>> starts_of(const ExecPlan& exec, int d) {
  std::vector<std::pair<std::size_t, const CollectiveStart*>> out;
  const auto& program = exec.programs[static_cast<std::size_t>(d)];
  for (std::size_t i = 0; i < program.size(); ++i)
    if (const auto* s = std::get_if<CollectiveStart>(&program[i])) out.emplace_back(i, s);
  return out;
}

bool touches(const Instruction& in, const std::vector<BufferId>& buffers) {
  bool hit = false;
  for_each_read(in, [&](BufferId b) { hit |= std::ranges::count(buffers, b) > 0; });
  if (const auto* f = std::get_if<Free>(&in)) hit |= std::ranges::count(buffers, f->buffer) > 0;
  return hit;
}

// Every member issues the same buckets in the same order (same tags, groups and tensors); each bucket
// starts right after the instruction that writes its last gradient part, its parts are freed right after
// it, and it is waited for right before the first instruction using any of its sums; the buckets replace
// every parameter-gradient all-reduce of a data-parallel plan.
TEST(BucketGradients, DataParallelGradientsGoIntoAgreedOverlappedBuckets) {
  for (const auto& [model, dp] : std::vector<std::pair<std::string, int>>{{"gpt3-125m", 2}, {"llama3-8b", 4}}) {
    SCOPED_TRACE(model);
    auto p = policy_plan(shrunk_training_graph(model, ir::DType::f32), "dp", {.dp = dp});
    const std::size_t reductions = blocking(p->exec, 0).first;
    ASSERT_GT(reductions, 0u);
    const ExecPassStats stats = run_exec_passes(p->exec);
    ASSERT_TRUE(check_exec_plan(p->exec)) << check_exec_plan(p->exec).error().to_string();
    EXPECT_EQ(stats.bucketed_reductions, static_cast<int>(reductions));
    EXPECT_EQ(stats.exchanges, 0);
    const auto on_zero = starts_of(p->exec, 0);
    EXPECT_EQ(static_cast<int>(on_zero.size()), stats.buckets);
    for (int d = 0; d < dp; ++d) {
      SCOPED_TRACE(d);
      EXPECT_EQ(blocking(p->exec, d).first, 0u);
      const auto& program = p->exec.programs[static_cast<std::size_t>(d)];
      const auto starts = starts_of(p->exec, d);
      ASSERT_EQ(starts.size(), on_zero.size());
      std::size_t held = 0;
      for (std::size_t k = 0; k < starts.size(); ++k) {
        const auto& [at, s] = starts[k];
        EXPECT_EQ(s->tag, on_zero[k].second->tag);
        EXPECT_EQ(s->group, on_zero[k].second->group);
        ASSERT_EQ(s->outputs.size(), on_zero[k].second->outputs.size());
        for (std::size_t i = 0; i < s->outputs.size(); ++i)
          EXPECT_EQ(p->exec.buffer(s->outputs[i]).piece.tensor, p->exec.buffer(on_zero[k].second->outputs[i]).piece.tensor);
        held += s->inputs.size();
        // Right after the writer of its last gradient part (other starts placed there aside).
        std::size_t before = at;
        while (before > 0 && std::holds_alternative<CollectiveStart>(program[before - 1])) --before;
        ASSERT_GT(before, 0u);
        bool writes = false;
        for_each_written(program[before - 1], [&](BufferId b) { writes |= std::ranges::count(s->inputs, b) > 0; });
        EXPECT_TRUE(writes) << "start at " << at << " does not follow its last gradient's writer";
        // Its parts freed right after it (unless another start still reads them).
        for (BufferId in : s->inputs) {
          std::size_t i = at + 1;
          for (; i < program.size() && !(std::holds_alternative<Free>(program[i]) && std::get<Free>(program[i]).buffer == in); ++i)
            EXPECT_TRUE(std::holds_alternative<Free>(program[i]) || std::holds_alternative<CollectiveStart>(program[i]));
          EXPECT_LT(i, program.size());
        }
        // Waited right before the first use of a sum: nothing uses one earlier, the next non-wait does.
        std::size_t wait = at;
        while (wait < program.size() && !(std::holds_alternative<CollectiveWait>(program[wait]) &&
                                          std::get<CollectiveWait>(program[wait]).tag == s->tag))
          EXPECT_FALSE(touches(program[wait++], s->outputs));
        ASSERT_LT(wait, program.size());
        std::size_t next = wait + 1;
        while (next < program.size() && std::holds_alternative<CollectiveWait>(program[next])) ++next;
        ASSERT_LT(next, program.size());
        EXPECT_TRUE(touches(program[next], s->outputs)) << "wait at " << wait;
      }
      EXPECT_EQ(held, reductions);
    }
  }
}

// DDP's assignment: a bucket takes gradients until it holds the cap (the group's first: the first cap).
TEST(BucketGradients, BucketsCloseAtTheCap) {
  for (const std::int64_t cap : {std::int64_t{1}, std::int64_t{4096}, std::int64_t{65536}, std::int64_t{25} << 20}) {
    for (const std::int64_t first : {std::int64_t{1}, std::int64_t{16384}, std::int64_t{1} << 20}) {
      SCOPED_TRACE(::testing::Message() << "cap " << cap << " first " << first);
      auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 2});
      const std::size_t reductions = blocking(p->exec, 0).first;
      bucket_gradients(p->exec, {.bucket_bytes = cap, .first_bucket_bytes = first});
      ASSERT_TRUE(check_exec_plan(p->exec));
      std::size_t total = 0;
      const auto starts = starts_of(p->exec, 0);
      for (std::size_t k = 0; k < starts.size(); ++k) {
        const CollectiveStart& s = *starts[k].second;
        total += s.inputs.size();
        std::int64_t bytes = 0;
        for (BufferId out : s.outputs) bytes += p->exec.buffer(out).bytes;
        EXPECT_LT(bytes - p->exec.buffer(s.outputs.back()).bytes, k == 0 ? first : cap)
            << "bucket " << k << " kept taking gradients past its cap";
        if (cap == 1 && first == 1) {
          EXPECT_EQ(s.inputs.size(), 1u);
        }
      }
      EXPECT_EQ(total, reductions);
    }
  }
}

// Under dp x tp only the data-parallel gradient reductions are bucketed, over the data-parallel groups;
// the tensor-parallel collectives of activations stay blocking where the plan put them.
TEST(BucketGradients, TensorParallelCollectivesStayBlocking) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp-tp", {.dp = 2, .tp = 2});
  std::vector<std::size_t> others;
  for (int d = 0; d < 4; ++d) others.push_back(blocking(p->exec, d).second);
  run_exec_passes(p->exec);
  ASSERT_TRUE(check_exec_plan(p->exec));
  for (int d = 0; d < 4; ++d) {
    SCOPED_TRACE(d);
    EXPECT_EQ(blocking(p->exec, d), std::pair(std::size_t{0}, others[static_cast<std::size_t>(d)]));
    EXPECT_GT(others[static_cast<std::size_t>(d)], 0u);
    std::set<std::vector<int>> groups;
    for (const auto& [at, s] : starts_of(p->exec, d)) groups.insert(s->group);
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups.begin()->size(), 2u);
  }
}

TEST(BucketGradients, NoneOnOneDeviceOrWithoutACap) {
  auto one = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 1});
  EXPECT_EQ(run_exec_passes(one->exec), ExecPassStats{});
  auto off = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp", {.dp = 2});
  const std::size_t length = off->exec.programs[0].size();
  EXPECT_EQ(run_exec_passes(off->exec, {.bucket_bytes = 0}), ExecPassStats{});
  EXPECT_EQ(off->exec.programs[0].size(), length);
  EXPECT_TRUE(starts_of(off->exec, 0).empty());
}

// With sends only (the general fallback), a value-part reduction is an exchange: every member sends its
// part to the others and combines. The pass makes each one all-reduce of the parts, drops the transfers
// and their buffers, and leaves nothing it would change again.
TEST(ExchangeToAllReduce, ExchangesBecomeAllReducesOfTheirParts) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp-tp", {.dp = 2, .tp = 2},
                       /*exec_passes=*/false, /*layout_search=*/false);
  ExecPlan& exec = p->exec;
  const auto count = [&](auto pred) {
    std::size_t n = 0;
    for (const auto& program : exec.programs) n += static_cast<std::size_t>(std::ranges::count_if(program, pred));
    return n;
  };
  const auto is_send = [](const Instruction& in) { return std::holds_alternative<Send>(in); };
  const auto is_collective = [](const Instruction& in) { return std::holds_alternative<Collective>(in); };
  ASSERT_EQ(count(is_collective), 0u);
  const std::size_t sends = count(is_send), buffers = exec.buffers.size(), tags = exec.collectives.size();
  const int exchanges = exchange_to_all_reduce(exec);
  ASSERT_TRUE(check_exec_plan(exec)) << check_exec_plan(exec).error().to_string();
  ASSERT_GT(exchanges, 0);
  // Pairs of tp or dp peers: one send and one received buffer per member and exchange gone.
  EXPECT_EQ(count(is_collective), 2u * static_cast<std::size_t>(exchanges));
  EXPECT_EQ(sends - count(is_send), 2u * static_cast<std::size_t>(exchanges));
  EXPECT_EQ(buffers - exec.buffers.size(), 2u * static_cast<std::size_t>(exchanges));
  EXPECT_EQ(exec.collectives.size(), tags + static_cast<std::size_t>(exchanges));
  for (const auto& program : exec.programs)
    for (const Instruction& in : program)
      if (const auto* c = std::get_if<Collective>(&in)) {
        EXPECT_EQ(c->kind, comm::Primitive::all_reduce);
        EXPECT_TRUE(std::ranges::is_sorted(c->group));
        const CollectiveInfo& info = exec.collectives[static_cast<std::size_t>(c->tag)];
        EXPECT_EQ(info.tensor, exec.buffer(c->output).piece.tensor);
        EXPECT_EQ(info.rule, "V->R all-reduce (an exchange of 2 value parts)");
        EXPECT_TRUE(exec.buffer(c->output).piece.value.is_whole());
        EXPECT_EQ(exec.buffer(c->input).piece.value.count, 2);
      }
  EXPECT_EQ(exchange_to_all_reduce(exec), 0);
}

// --- prefetch_gathers ---------------------------------------------------------------------------------

bool is_parameter_gather(const ExecPlan& exec, const Instruction& in) {
  const auto* c = std::get_if<Collective>(&in);
  return c != nullptr && c->kind == comm::Primitive::all_gather &&
         exec.plan->graph->tensor(exec.buffer(c->output).piece.tensor).role == ir::TensorRole::parameter;
}

std::size_t parameter_gathers(const ExecPlan& exec, int d) {
  return static_cast<std::size_t>(
      std::ranges::count_if(exec.programs[static_cast<std::size_t>(d)], [&](const Instruction& in) { return is_parameter_gather(exec, in); }));
}

std::vector<std::string> texts(const ExecPlan& exec) {
  std::vector<std::string> out;
  for (int d = 0; d < exec.num_devices; ++d) out.push_back(exec_to_text(exec, d));
  return out;
}

// On the hand-built ZeRO-3 step, the gather starts right after its shard is loaded (the program's first,
// nothing to wait for) and is waited for right before fc reads the weight: gathered(n, async) exactly.
TEST(PrefetchGathers, TheFirstGatherStartsOnceItsShardIsLoaded) {
  for (int n : {2, 4}) {
    SCOPED_TRACE(n);
    auto blocking = testing::gathered(n);
    ASSERT_TRUE(check_exec_plan(blocking->exec));
    const ExecPassStats stats = prefetch_gathers(blocking->exec);
    EXPECT_EQ(stats.prefetches, 1);
    EXPECT_EQ(stats.prefetched_gathers, 1);
    ASSERT_TRUE(check_exec_plan(blocking->exec)) << check_exec_plan(blocking->exec).error().to_string();
    ASSERT_EQ(blocking->exec.collectives.size(), 2u);
    EXPECT_EQ(blocking->exec.collectives[1].rule, "prefetch: all-gather of 1 parameters (256 B)");
    for (auto& program : blocking->exec.programs)  // the async fixture's tag
      for (Instruction& in : program) {
        if (auto* start = std::get_if<CollectiveStart>(&in)) start->tag = 0;
        if (auto* wait = std::get_if<CollectiveWait>(&in)) wait->tag = 0;
      }
    EXPECT_EQ(texts(blocking->exec), texts(testing::gathered(n, /*async=*/true)->exec));
  }
}

// Per device: the starts of parameter gathers (kind all-gather) with their position, and where each is
// waited for.
struct Prefetch {
  std::size_t start = 0, wait = 0;
  const CollectiveStart* in = nullptr;
};
std::vector<Prefetch> prefetches_of(const ExecPlan& exec, int d) {
  std::vector<Prefetch> out;
  const auto& program = exec.programs[static_cast<std::size_t>(d)];
  for (std::size_t i = 0; i < program.size(); ++i)
    if (const auto* s = std::get_if<CollectiveStart>(&program[i]); s != nullptr && s->kind == comm::Primitive::all_gather) {
      std::size_t w = i + 1;
      while (w < program.size() && !(std::holds_alternative<CollectiveWait>(program[w]) && std::get<CollectiveWait>(program[w]).tag == s->tag)) ++w;
      out.push_back({i, w, s});
    }
  return out;
}

// The next instruction at or after `i` that is not a wait or a start: what the program runs there.
std::size_t next_work(const std::vector<Instruction>& program, std::size_t i) {
  while (i < program.size() && (std::holds_alternative<CollectiveWait>(program[i]) || std::holds_alternative<CollectiveStart>(program[i]))) ++i;
  return i;
}

// Every ZeRO-3 parameter gather (forward and backward re-gathers, every micro-batch) becomes part of a
// start; every member issues the same starts in the same order; each is waited for right before the
// first instruction reading its gathered parameters; and in reader order, start k is issued right where
// start k - depth is waited for (the earlier ones: where their shards are loaded), so exactly
// min(k + 1, depth) are in flight when it is issued.
TEST(PrefetchGathers, ZeroThreeGathersStartDepthAheadOfTheirReaders) {
  struct Case {
    std::string model, policy;
    policy::ParallelConfig config;
    int depth;
  };
  const std::vector<Case> cases = {
      {"gpt3-125m", "zero", {.dp = 2, .zero = 3}, 1},
      {"gpt3-125m", "zero", {.dp = 2, .micro_batches = 2, .zero = 3}, 1},
      {"llama3-8b", "zero", {.dp = 4, .zero = 3}, 2},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 3}, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.model << " " << c.policy << " depth " << c.depth);
    auto p = policy_plan(shrunk_training_graph(c.model, ir::DType::f32), c.policy, c.config);
    ExecPlan& exec = p->exec;
    const std::size_t gathers = parameter_gathers(exec, 0);
    ASSERT_GT(gathers, 0u);
    const ExecPassStats stats = run_exec_passes(exec, {.prefetch_depth = c.depth});
    ASSERT_TRUE(check_exec_plan(exec)) << check_exec_plan(exec).error().to_string();
    EXPECT_GT(stats.prefetches, 0);
    const auto on_zero = prefetches_of(exec, 0);
    for (int d = 0; d < exec.num_devices; ++d) {
      SCOPED_TRACE(d);
      EXPECT_EQ(parameter_gathers(exec, d), 0u);
      const auto& program = exec.programs[static_cast<std::size_t>(d)];
      const auto mine = prefetches_of(exec, d);
      std::size_t held = 0;
      for (std::size_t k = 0; k < mine.size(); ++k) {
        const Prefetch& s = mine[k];
        held += s.in->outputs.size();
        ASSERT_LT(s.wait, program.size());
        // Nothing reads the gathered parameters before the wait; the work right after it does.
        for (std::size_t i = s.start + 1; i < s.wait; ++i) EXPECT_FALSE(touches(program[i], s.in->outputs)) << i;
        const std::size_t reader = next_work(program, s.wait);
        ASSERT_LT(reader, program.size());
        EXPECT_TRUE(touches(program[reader], s.in->outputs)) << "wait at " << s.wait;
        // Starts in reader order, so k - depth's wait is where k starts (or k is among the first).
        if (k > 0) {
          EXPECT_LT(mine[k - 1].wait, s.wait);
        }
        std::size_t in_flight = 0;
        for (std::size_t j = 0; j <= k; ++j) in_flight += mine[j].wait > s.start;
        EXPECT_EQ(in_flight, std::min<std::size_t>(k + 1, static_cast<std::size_t>(c.depth))) << "start " << k;
        if (k >= static_cast<std::size_t>(c.depth)) {
          EXPECT_EQ(next_work(program, s.start), next_work(program, mine[k - c.depth].wait)) << "start " << k;
        }
      }
      EXPECT_EQ(held, gathers);
      // Members of one group issue the same starts in one order (here every device is in the dp group).
      if (c.config.tp == 1) {
        ASSERT_EQ(mine.size(), on_zero.size());
        for (std::size_t k = 0; k < mine.size(); ++k) {
          EXPECT_EQ(mine[k].in->tag, on_zero[k].in->tag);
          EXPECT_EQ(mine[k].in->group, on_zero[k].in->group);
        }
      }
    }
  }
}

// Depth 0 turns prefetching off: the programs are left exactly as they were.
TEST(PrefetchGathers, DepthZeroLeavesThePlanAsIs) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "zero", {.dp = 2, .zero = 3});
  const std::vector<std::string> before = texts(p->exec);
  EXPECT_EQ(prefetch_gathers(p->exec, {.prefetch_depth = 0}), ExecPassStats{});
  EXPECT_EQ(texts(p->exec), before);
  EXPECT_EQ(run_exec_passes(p->exec, {.prefetch_depth = 0}), ExecPassStats{});
  EXPECT_EQ(texts(p->exec), before);
}

// Without ZeRO-3 there is no parameter gather ahead of a reader: ZeRO-1's gathers of the updated shards
// at the step's end are read by nothing in the step, and a dp plan gathers nothing.
TEST(PrefetchGathers, NothingToPrefetchWithoutZeroThree) {
  for (int zero : {0, 1}) {
    auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), zero == 0 ? "dp" : "zero", {.dp = 2, .zero = zero});
    const ExecPassStats stats = prefetch_gathers(p->exec);
    EXPECT_EQ(stats.prefetches, 0) << "zero " << zero;
  }
}

// Members must agree: where device 1 reads a gathered bias before the weight gathered for the same
// compute, it would start the two apart while device 0 starts them together, so their group would issue
// its collectives in different orders; every gather of the group stays blocking.
TEST(PrefetchGathers, GroupsWhoseMembersDisagreeStayBlocking) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "zero", {.dp = 2, .zero = 3});
  ExecPlan& exec = p->exec;
  auto& program = exec.programs[1];
  // The first compute reading two gathered parameters: the first layer norm (weight and bias).
  std::size_t at = 0;
  std::vector<BufferId> gathered;
  for (std::size_t i = 0; i < program.size() && at == 0; ++i) {
    if (const auto* c = std::get_if<Collective>(&program[i]); c != nullptr && is_parameter_gather(exec, program[i])) gathered.push_back(c->output);
    if (const auto* c = std::get_if<Compute>(&program[i])) {
      std::vector<BufferId> read;
      for (BufferId b : c->inputs)
        if (std::ranges::count(gathered, b) > 0) read.push_back(b);
      if (read.size() == 2) {
        at = i;
        gathered = read;
      }
    }
  }
  ASSERT_GT(at, 0u);
  const BufferId copy = exec.add_buffer(1, exec.buffer(gathered[1]).piece, exec.buffer(gathered[1]).bytes);
  program.insert(program.begin() + static_cast<std::ptrdiff_t>(at), {Local{LocalKind::slice, {gathered[1]}, copy}, Free{copy}});
  ASSERT_TRUE(check_exec_plan(exec)) << check_exec_plan(exec).error().to_string();
  const std::size_t gathers = parameter_gathers(exec, 0);
  EXPECT_EQ(prefetch_gathers(exec), ExecPassStats{});
  ASSERT_TRUE(check_exec_plan(exec));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(parameter_gathers(exec, d), gathers);
    EXPECT_TRUE(prefetches_of(exec, d).empty());
  }
}

}  // namespace
}  // namespace loom::exec

namespace loom::exec {
namespace {

bool is_activation_sum(const ExecPlan& exec, BufferId b) {
  const ir::Graph& graph = *exec.plan->graph;
  const ir::FullTensor& t = graph.tensor(exec.buffer(b).piece.tensor);
  return t.role == ir::TensorRole::activation ||
         (t.role == ir::TensorRole::gradient && graph.tensor(t.owner).role == ir::TensorRole::activation);
}

std::size_t blocking_activation_all_reduces(const ExecPlan& exec, int d) {
  std::size_t n = 0;
  for (const Instruction& in : exec.programs[static_cast<std::size_t>(d)])
    if (const auto* c = std::get_if<Collective>(&in))
      n += c->kind == comm::Primitive::all_reduce && is_activation_sum(exec, c->output);
  return n;
}

// Oases' sub-batches under tp 2 (and dp 2 x tp 2): every blocking all-reduce of an activation or an
// activation's gradient, forward and backward, becomes a start right after the compute writing its input
// and a wait right before the first instruction using its sum, with compute (the other sub-batch's
// segment) between them; every member of a group starts them in one order; the plan still checks.
TEST(OverlapCollectives, ActivationAllReducesStartAfterTheirWriterAndWaitBeforeTheirReader) {
  for (const policy::ParallelConfig& config : {policy::ParallelConfig{.tp = 2, .overlap = policy::Overlap::oases},
                                               policy::ParallelConfig{.dp = 2, .tp = 2, .overlap = policy::Overlap::oases}}) {
    SCOPED_TRACE(config.dp);
    auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "megatron", config);
    const int devices = p->exec.num_devices;
    std::vector<std::size_t> before;
    for (int d = 0; d < devices; ++d) before.push_back(blocking_activation_all_reduces(p->exec, d));
    const ExecPassStats stats = run_exec_passes(p->exec, {.overlap_collectives = true});
    ASSERT_TRUE(check_exec_plan(p->exec));
    // Each all-reduce counted once: tp 2 members each, dp replicas have their own.
    EXPECT_EQ(stats.overlapped, static_cast<int>(before[0]) * config.dp);
    std::map<std::vector<int>, std::vector<std::int64_t>> order;  // group -> its start tags, as its first member issues them
    for (int d = 0; d < devices; ++d) {
      SCOPED_TRACE(d);
      EXPECT_GT(before[static_cast<std::size_t>(d)], 4u);
      EXPECT_EQ(blocking_activation_all_reduces(p->exec, d), 0u);
      const auto& program = p->exec.programs[static_cast<std::size_t>(d)];
      std::map<std::vector<int>, std::vector<std::int64_t>> mine;
      std::size_t overlapped = 0;
      for (const auto& [at, s] : starts_of(p->exec, d)) {
        if (!is_activation_sum(p->exec, s->outputs[0])) continue;
        ++overlapped;
        mine[s->group].push_back(s->tag);
        ASSERT_EQ(s->inputs.size(), 1u);
        // Right after its writer: only frees and other starts after the same writer between them.
        std::size_t writer = at;
        while (writer > 0 && (std::holds_alternative<Free>(program[writer - 1]) ||
                              std::holds_alternative<CollectiveStart>(program[writer - 1])))
          --writer;
        ASSERT_GT(writer, 0u);
        bool writes = false;
        for_each_written(program[writer - 1], [&](BufferId b) { writes |= b == s->inputs[0]; });
        EXPECT_TRUE(writes && std::holds_alternative<Compute>(program[writer - 1]))
            << instruction_to_text(p->exec, program[writer - 1]);
        std::size_t wait = at + 1, computes = 0;
        while (wait < program.size() && !(std::holds_alternative<CollectiveWait>(program[wait]) &&
                                          std::get<CollectiveWait>(program[wait]).tag == s->tag)) {
          EXPECT_FALSE(touches(program[wait], s->outputs));
          computes += std::holds_alternative<Compute>(program[wait]);
          ++wait;
        }
        EXPECT_GT(computes, 0u);
        // Right before the first use of its sums: only other waits (of the same reader) between them.
        std::size_t reader = wait + 1;
        while (reader < program.size() && std::holds_alternative<CollectiveWait>(program[reader])) ++reader;
        ASSERT_LT(reader, program.size());
        EXPECT_TRUE(touches(program[reader], s->outputs)) << instruction_to_text(p->exec, program[reader]);
      }
      EXPECT_EQ(overlapped, before[static_cast<std::size_t>(d)]);
      for (const auto& [group, tags] : mine) {
        const auto [it, fresh] = order.try_emplace(group, tags);
        if (!fresh) { EXPECT_EQ(it->second, tags); }
      }
    }
  }
}

// Off unless asked for; and on plain Megatron (no sub-batches) an all-reduce's sum is read right after it,
// with no compute between to hide it, but for one: the token embedding's partial sums, beside the
// position table's lookup.
TEST(OverlapCollectives, OffUnlessAskedAndOnlyWhereComputeLiesBetween) {
  auto q = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "megatron",
                       {.tp = 2, .overlap = policy::Overlap::oases});
  const std::size_t sub_batched = q->exec.programs[0].size();
  EXPECT_EQ(run_exec_passes(q->exec).overlapped, 0);
  EXPECT_EQ(q->exec.programs[0].size(), sub_batched);
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "megatron", {.tp = 2});
  const std::size_t length = p->exec.programs[0].size();
  EXPECT_EQ(overlap_collectives(p->exec), 1);
  EXPECT_EQ(p->exec.programs[0].size(), length + 1);  // a start and a wait for an all-reduce
  const auto starts = starts_of(p->exec, 0);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(p->exec.plan->graph->tensor(p->exec.buffer(starts[0].second->outputs[0]).piece.tensor).name, "wte");
}

}  // namespace
}  // namespace loom::exec

namespace loom::exec {
namespace {

// Oases' cross-pass schedule and fine-grained recomputation (papers/oases.md §IV-A, B; Fig. 4d), as they
// fall out of the sub-batches' order and recomputation's rules (plan/recompute.h): with full
// recomputation, a layer's forward is recomputed right before its backward needs it, inside its
// sub-batch's backward segment, so the all-reduce of one sub-batch's backward (started after the MLP's
// fc1 backward: the gradient of ln2's output) runs beside the other sub-batch's recomputation and
// backward; and since values that arrived by communication are checkpoints, recomputation issues no
// collective: the all-reduces are those of the plan without recomputation.
TEST(OverlapCollectives, RecomputationRunsBesideTheOtherSubBatchsAllReduce) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  const auto count_all_reduces = [](const ExecPlan& exec) {
    std::size_t n = 0;
    for (const Instruction& in : exec.programs[0])
      n += std::holds_alternative<Collective>(in) || std::holds_alternative<CollectiveStart>(in);
    return n;
  };
  auto plain = policy_plan(graph, "megatron", {.tp = 2, .overlap = policy::Overlap::oases}, /*exec_passes=*/true);
  auto p = policy_plan(graph, "megatron", {.tp = 2, .recompute = policy::Recompute::full, .overlap = policy::Overlap::oases},
                       /*exec_passes=*/true);
  EXPECT_EQ(count_all_reduces(p->exec), count_all_reduces(plain->exec));
  for (int d = 0; d < 2; ++d) {
    SCOPED_TRACE(d);
    const auto& program = p->exec.programs[static_cast<std::size_t>(d)];
    std::set<plan::SubOpId> computed;  // forward sub-ops computed so far: a second compute is a recomputation
    std::map<std::int64_t, std::size_t> started;  // tag -> recomputations since its start
    std::size_t checked = 0;
    for (const Instruction& in : program) {
      if (const auto* c = std::get_if<Compute>(&in); c != nullptr && !p->plan.op_of(c->sub_op).is_mirror() &&
                                                       p->plan.op_of(c->sub_op).pass == ir::Pass::forward) {
        if (!computed.insert(c->sub_op).second)
          for (auto& [tag, recomputed] : started) ++recomputed;
      }
      if (const auto* s = std::get_if<CollectiveStart>(&in);
          s != nullptr && p->plan.graph->tensor(p->exec.buffer(s->outputs[0]).piece.tensor).name.ends_with("ln2.grad"))
        started.emplace(s->tag, 0);
      if (const auto* w = std::get_if<CollectiveWait>(&in)) {
        if (const auto it = started.find(w->tag); it != started.end()) {
          EXPECT_GT(it->second, 0u) << "no recomputation beside all-reduce #" << w->tag;
          ++checked;
          started.erase(it);
        }
      }
    }
    EXPECT_EQ(checked, 4u);  // 2 layers x 2 sub-batches
  }
}

// --recompute-collectives (exec/materialize.h): Megatron's full recompute sums again, in the
// recomputation, the two row-parallel outputs of each layer (the attention's out-projection and the
// MLP's fc2, whose sum no backward op reads), with and without Oases' sub-batches; every other
// collective runs once, and a second all-reduce of a tensor comes after the backward has begun.
TEST(MaterializeRecomputeCollectives, SumsRowParallelOutputsAgainInTheRecomputation) {
  const ir::Graph& graph = shrunk_training_graph("gpt3-125m", ir::DType::f32);
  for (const policy::Overlap overlap : {policy::Overlap::none, policy::Overlap::oases}) {
    for (const bool again : {false, true}) {
      SCOPED_TRACE(fmt::format("{} {}", policy::name(overlap), again));
      api::JobOptions options = api::with_config(
          {.policy = "megatron"}, {.tp = 2, .recompute = policy::Recompute::full, .overlap = overlap});
      options.recompute_collectives = again;
      options.exec_passes = false;  // every all-reduce blocking, as materialized
      const auto p = policy_plan(graph, options);
      const int sub_batches = overlap == policy::Overlap::oases ? 2 : 1;
      for (const auto& program : p->exec.programs) {
        std::map<std::string, int> reductions;  // by tensor name
        bool backward_begun = false;
        for (const Instruction& in : program) {
          if (const auto* c = std::get_if<Compute>(&in))
            backward_begun |= p->plan.op_of(c->sub_op).pass == ir::Pass::backward;
          const auto* ar = std::get_if<Collective>(&in);
          if (ar == nullptr || ar->kind != comm::Primitive::all_reduce) continue;
          const std::string& name = p->plan.graph->tensor(p->exec.buffer(ar->output).piece.tensor).name;
          if (++reductions[name] > sub_batches) {
            EXPECT_TRUE(backward_begun) << name;
          }
        }
        for (const auto& [name, n] : reductions) {
          const bool row_parallel = name.ends_with("attn.out") || name.ends_with("mlp.fc2");
          EXPECT_EQ(n, (again && row_parallel ? 2 : 1) * sub_batches) << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::exec
