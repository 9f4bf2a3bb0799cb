// The simulator prices a collective that is one group of a multi-group step (exec::CollectiveInfo::step)
// as the layout search priced that step (sim/durations.h): the search's comm::Step of every concurrent
// group, sharing the nodes' NICs, not the collective's group alone; and the collectives of the searches
// that run at once for one tensor's pieces (exec/concurrent_steps.h: the dp reductions of a weight's tp
// pieces, ZeRO's gathers and reduce-scatters of them) as one comm::Step of all their groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "loom/api/job.h"
#include "loom/sim/durations.h"
#include "../temp_path.h"

namespace loom::sim {
namespace {

namespace fs = std::filesystem;

// A cluster of `nodes` x `gpus` H100s with `nics` NICs per node, written once per shape.
std::string cluster_file(int nodes, int gpus, int nics) {
  const std::string name = "h100-" + std::to_string(nodes) + "x" + std::to_string(gpus) + "-nic" + std::to_string(nics);
  const fs::path file = loom::testing::process_temp_path("loom_group_steps_" + name, ".yaml");
  std::ofstream(file) << "name: \"" << name << "\"\nnodes: " << nodes << "\ngpus_per_node: " << gpus
                      << "\ngpu:\n  name: \"H100\"\n"
                      << "  peak_bf16: 989e12\n  peak_fp16: 989e12\n  peak_fp32: 67e12\n  memory_bytes: 85899345920\n"
                      << "  memory_bandwidth: 3.35e12\nintra:\n  kind: nvswitch\n  bandwidth: 450e9\n  latency: 1e-6\n"
                      << "inter:\n  kind: infiniband\n  bandwidth: " << 50e9 * nics / gpus << "\n  latency: 5e-6\n"
                      << "nics_per_node: " << nics << "\nnic_bandwidth: 50e9\n";
  return file.string();
}

// Every step the layout search prices, with its price: the search's own numbers, recorded as it runs.
class RecordingCost final : public comm::CommCostModel {
 public:
  explicit RecordingCost(const cluster::Cluster& cluster) : model_(cluster) {}
  double step_time(const comm::Step& step) const override {
    const double seconds = model_.step_time(step);
    if (step.groups.size() > 1) {
      const std::lock_guard lock(mutex_);
      priced_.push_back({step, seconds});
    }
    return seconds;
  }
  std::string fingerprint() const override { return "recording " + model_.fingerprint(); }

  // The search's price of the step of `primitive` over `groups` (each ascending, the list sorted) moving
  // S = `bytes`; nullopt when it priced none.
  std::optional<double> price(comm::Primitive primitive, const std::vector<std::vector<int>>& groups,
                              std::int64_t bytes) const {
    for (const auto& [step, seconds] : priced_) {
      if (step.primitive != primitive || step.buffer_bytes != bytes || step.groups.size() != groups.size()) continue;
      std::vector<std::vector<int>> sorted = step.groups;
      for (auto& g : sorted) std::ranges::sort(g);
      std::ranges::sort(sorted);
      if (sorted == groups) return seconds;
    }
    return std::nullopt;
  }

 private:
  comm::AlphaBetaCostModel model_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<comm::Step, double>> priced_;
};

struct RandomJob {
  int nodes = 2, gpus = 2, nics = 1, layers = 1;
  std::string policy = "megatron";
  policy::ParallelConfig config;
  std::string name;
};

// 2-4 nodes of 2 or 4 GPUs, 1 NIC per node or one per GPU; megatron with tp over two nodes (dp over the
// pairs of nodes), tp inside a node with dp across nodes, ZeRO-1 over every device (node-major shards), or
// ZeRO-3 with tp inside a node (`zero_tp`).
RandomJob random_job(std::mt19937& rng, bool zero_tp = false) {
  const auto pick = [&](std::initializer_list<int> values) {
    return values.begin()[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng)];
  };
  RandomJob j;
  j.nodes = pick({2, 3, 4});
  j.gpus = pick({2, 4});
  j.nics = pick({1, j.gpus});
  j.layers = pick({1, 2});
  switch (zero_tp ? 3 : pick({0, 1, 2})) {
    case 0:
      if (j.nodes % 2 == 0) {
        j.config = {.dp = j.nodes / 2, .tp = 2 * j.gpus, .micro_batches = 1};
        break;
      }
      [[fallthrough]];
    case 1: j.config = {.dp = j.nodes, .tp = j.gpus, .micro_batches = 1}; break;
    case 2:
      j.policy = "zero";
      j.config = {.dp = j.nodes * j.gpus, .micro_batches = 1, .zero = 1};
      break;
    default: j.config = {.dp = j.nodes, .tp = j.gpus, .micro_batches = 1, .zero = 3};
  }
  j.name = j.policy + " dp " + std::to_string(j.config.dp) + " tp " + std::to_string(j.config.tp) + " on " +
           std::to_string(j.nodes) + "x" + std::to_string(j.gpus) + " nics " + std::to_string(j.nics) + " layers " +
           std::to_string(j.layers);
  return j;
}

// A random job's explicit plan, materialized by the layout search pricing every step it weighs, and
// the simulator's durations of it.
struct Planned {
  std::unique_ptr<api::Job> job;
  std::shared_ptr<RecordingCost> recording;
  exec::ExecPlan exec;
  std::optional<cost::ComputeModel> compute;  // read by the durations
  std::optional<Durations> durations;
};

void materialize(const RandomJob& j, Planned& out) {
  api::JobOptions options;
  options.model = "llama3-8b";
  options.layers = j.layers;
  options.seq = 256;
  options.cluster = cluster_file(j.nodes, j.gpus, j.nics);
  options.policy = j.policy;
  options.fold = api::Fold::off;
  options.exec_passes = false;
  options.global_batch = j.config.dp;
  auto job = api::load_job(api::with_config(options, j.config));
  ASSERT_TRUE(job) << job.error().to_string();
  ASSERT_TRUE(api::apply_policy(**job));
  out.job = std::move(*job);
  const cluster::Cluster& cluster = out.job->cluster;
  out.recording = std::make_shared<RecordingCost>(cluster);
  exec::MaterializeOptions made_options;
  made_options.cluster = cluster;
  made_options.cost_model = out.recording;
  auto made = exec::materialize(out.job->plan, out.job->slice_devices, made_options);
  ASSERT_TRUE(made) << made.error().to_string();
  out.exec = std::move(made->exec);
  auto compute = cost::ComputeModel::make(out.job->plan, out.job->catalog, cluster.gpu, nullptr);
  ASSERT_TRUE(compute);
  out.compute.emplace(std::move(*compute));
  auto durations = model_durations(out.exec, *out.compute, cluster);
  ASSERT_TRUE(durations);
  out.durations = std::move(*durations);
}

// One comm::Step of `groups` for collective `c` (its kind and S), as the search's model prices it.
double one_step_price(const comm::AlphaBetaCostModel& model, const exec::ExecPlan& exec, const exec::Collective& c,
                      const std::vector<std::vector<int>>& groups) {
  comm::Step step = collective_step(exec, c, exec.buffer(c.input).bytes);
  step.groups = groups;
  return model.step_time(step);
}

// Random jobs over 2-4 nodes, materialized by the layout search pricing every step it weighs: each
// collective of a multi-group step is priced by the simulator's durations as one comm::Step of its step's
// groups at its S, which is exactly the search's price where the search priced that step itself (all but
// the joined steps of concurrent searches, ConcurrentPiecesOfOneTensorArePricedAsOneStep below); and where
// the step's groups share a NIC that is more than the group alone.
TEST(GroupSteps, EachGroupIsPricedAsTheSearchPricedItsStep) {
  std::mt19937 rng(30);
  int checked = 0, searched_steps = 0, shared = 0;
  for (int round = 0; round < 10; ++round) {
    const RandomJob j = random_job(rng);
    SCOPED_TRACE(j.name);
    Planned m;
    ASSERT_NO_FATAL_FAILURE(materialize(j, m));
    const exec::ExecPlan& exec = m.exec;
    const comm::AlphaBetaCostModel model(m.job->cluster);
    for (const auto& program : exec.programs)
      for (const exec::Instruction& in : program) {
        const auto* c = std::get_if<exec::Collective>(&in);
        if (c == nullptr) continue;
        const std::int64_t step = exec.collectives[static_cast<std::size_t>(c->tag)].step;
        if (step < 0) continue;
        ASSERT_EQ(priced_step(exec, *c), step) << "collective #" << c->tag << "'s group is not among its step's";
        const std::int64_t bytes = exec.buffer(c->input).bytes;
        const comm::Step alone = collective_step(exec, *c, bytes);
        const auto& groups = exec.group_steps[static_cast<std::size_t>(step)];
        const double priced = m.durations->collective(*c, bytes);
        EXPECT_DOUBLE_EQ(priced, one_step_price(model, exec, *c, groups)) << "collective #" << c->tag;
        if (const auto searched = m.recording->price(c->kind, groups, alone.buffer_bytes)) {
          EXPECT_DOUBLE_EQ(priced, *searched) << "collective #" << c->tag;
          ++searched_steps;
        }
        ++checked;
        shared += priced > model.step_time(alone) * (1 + 1e-9);
      }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(searched_steps, 0);
  EXPECT_GT(shared, 0);  // some steps' groups share a NIC: priced alone, they would be faster
}

// Random multi-node jobs (Megatron tp x dp, ZeRO-1, ZeRO-3 with tp): the collectives of one kind that a
// weight's pieces issue at once (its gradient's dp reductions, one search per tp piece; ZeRO-3's gathers
// of its pieces), over disjoint groups, are priced as one step of all those groups: every one of them is
// one group of the same group step, whose groups are exactly theirs, and the simulator's price of each is
// one comm::Step of them all. Where the groups cross one NIC, that is more than each group alone.
TEST(GroupSteps, ConcurrentPiecesOfOneTensorArePricedAsOneStep) {
  std::mt19937 rng(31);
  int tensors = 0, shared = 0, joined = 0;
  for (int round = 0; round < 12; ++round) {
    const RandomJob j = random_job(rng, /*zero_tp=*/round % 3 == 2);
    SCOPED_TRACE(j.name);
    Planned m;
    ASSERT_NO_FATAL_FAILURE(materialize(j, m));
    const exec::ExecPlan& exec = m.exec;
    const ir::Graph& graph = *m.job->plan.graph;
    const comm::AlphaBetaCostModel model(m.job->cluster);
    // By (tensor, kind): the weight's (or its gradient's) collectives and their distinct groups.
    std::map<std::pair<std::uint32_t, comm::Primitive>, std::vector<const exec::Collective*>> issued;
    for (const auto& program : exec.programs)
      for (const exec::Instruction& in : program)
        if (const auto* c = std::get_if<exec::Collective>(&in)) {
          const ir::FullTensor& t = graph.tensor(exec.collectives[static_cast<std::size_t>(c->tag)].tensor);
          const bool weight = t.role == ir::TensorRole::parameter ||
                              (t.role == ir::TensorRole::gradient && t.owner.valid() &&
                               graph.tensor(t.owner).role == ir::TensorRole::parameter);
          if (weight) issued[{t.id.value, c->kind}].push_back(c);
        }
    for (const auto& [key, collectives] : issued) {
      std::set<std::vector<int>> distinct;
      for (const exec::Collective* c : collectives) distinct.insert(exec::canonical_groups({c->group}).front());
      std::vector<int> members;
      for (const std::vector<int>& g : distinct) members.insert(members.end(), g.begin(), g.end());
      std::ranges::sort(members);
      // Only pieces whose groups are disjoint run at once (a hierarchical route's steps of one kind overlap).
      if (distinct.size() < 2 || std::ranges::adjacent_find(members) != members.end()) continue;
      const std::vector<std::vector<int>> all(distinct.begin(), distinct.end());
      SCOPED_TRACE("tensor '" + graph.tensor(ir::TensorId{key.first}).name + "' " + std::string(comm::name(key.second)));
      for (const exec::Collective* c : collectives) {
        const std::int64_t step = priced_step(exec, *c);
        ASSERT_GE(step, 0) << "collective #" << c->tag << " is priced alone";
        EXPECT_EQ(exec.group_steps[static_cast<std::size_t>(step)], all) << "collective #" << c->tag;
        const std::int64_t bytes = exec.buffer(c->input).bytes;
        const double priced = m.durations->collective(*c, bytes);
        EXPECT_DOUBLE_EQ(priced, one_step_price(model, exec, *c, all)) << "collective #" << c->tag;
        const comm::Step alone = collective_step(exec, *c, bytes);
        shared += priced > model.step_time(alone) * (1 + 1e-9);
        joined += !m.recording->price(c->kind, all, alone.buffer_bytes).has_value();
      }
      ++tensors;
    }
  }
  EXPECT_GT(tensors, 0);
  EXPECT_GT(shared, 0);  // some pieces' groups share a NIC: priced alone, they would be faster
  EXPECT_GT(joined, 0);  // some steps join separate searches (no search priced all their groups at once)
}

}  // namespace
}  // namespace loom::sim
