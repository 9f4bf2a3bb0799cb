// The simulator prices a collective that is one group of a multi-group step (exec::CollectiveInfo::step)
// as the layout search priced that step (sim/durations.h): the search's comm::Step of every concurrent
// group, sharing the nodes' NICs, not the collective's group alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "loom/api/job.h"
#include "loom/sim/durations.h"

namespace loom::sim {
namespace {

namespace fs = std::filesystem;

// A cluster of `nodes` x `gpus` H100s with `nics` NICs per node, written once per shape.
std::string cluster_file(int nodes, int gpus, int nics) {
  const std::string name = "h100-" + std::to_string(nodes) + "x" + std::to_string(gpus) + "-nic" + std::to_string(nics);
  const fs::path file = fs::temp_directory_path() / ("loom_group_steps_" + name + ".yaml");
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
// pairs of nodes), tp inside a node with dp across nodes, or ZeRO-1 over every device (node-major shards).
RandomJob random_job(std::mt19937& rng) {
  const auto pick = [&](std::initializer_list<int> values) {
    return values.begin()[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(rng)];
  };
  RandomJob j;
  j.nodes = pick({2, 3, 4});
  j.gpus = pick({2, 4});
  j.nics = pick({1, j.gpus});
  j.layers = pick({1, 2});
  switch (pick({0, 1, 2})) {
    case 0:
      if (j.nodes % 2 == 0) {
        j.config = {.dp = j.nodes / 2, .tp = 2 * j.gpus, .micro_batches = 1};
        break;
      }
      [[fallthrough]];
    case 1: j.config = {.dp = j.nodes, .tp = j.gpus, .micro_batches = 1}; break;
    default:
      j.policy = "zero";
      j.config = {.dp = j.nodes * j.gpus, .micro_batches = 1, .zero = 1};
  }
  j.name = j.policy + " dp " + std::to_string(j.config.dp) + " tp " + std::to_string(j.config.tp) + " on " +
           std::to_string(j.nodes) + "x" + std::to_string(j.gpus) + " nics " + std::to_string(j.nics) + " layers " +
           std::to_string(j.layers);
  return j;
}

// Random jobs over 2-4 nodes, materialized by the layout search pricing every step it weighs: each
// collective of a multi-group step is priced by the simulator's durations exactly as the search priced
// that step (its groups and S), and where the step's groups share a NIC that is more than the group alone.
TEST(GroupSteps, EachGroupIsPricedAsTheSearchPricedItsStep) {
  std::mt19937 rng(30);
  int checked = 0, shared = 0;
  for (int round = 0; round < 10; ++round) {
    const RandomJob j = random_job(rng);
    SCOPED_TRACE(j.name);
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
    const cluster::Cluster& cluster = (*job)->cluster;
    auto recording = std::make_shared<RecordingCost>(cluster);
    exec::MaterializeOptions made_options;
    made_options.cluster = cluster;
    made_options.cost_model = recording;
    auto made = exec::materialize((*job)->plan, (*job)->slice_devices, made_options);
    ASSERT_TRUE(made) << made.error().to_string();
    const exec::ExecPlan& exec = made->exec;
    auto compute = cost::ComputeModel::make((*job)->plan, (*job)->catalog, cluster.gpu, nullptr);
    ASSERT_TRUE(compute);
    auto durations = model_durations(exec, *compute, cluster);
    ASSERT_TRUE(durations);
    const comm::AlphaBetaCostModel alone_model(cluster);
    for (const auto& program : exec.programs)
      for (const exec::Instruction& in : program) {
        const auto* c = std::get_if<exec::Collective>(&in);
        if (c == nullptr) continue;
        const std::int64_t step = exec.collectives[static_cast<std::size_t>(c->tag)].step;
        if (step < 0) continue;
        ASSERT_EQ(priced_step(exec, *c), step) << "collective #" << c->tag << "'s group is not among its step's";
        const std::int64_t bytes = exec.buffer(c->input).bytes;
        const comm::Step alone = collective_step(exec, *c, bytes);
        const auto searched = recording->price(c->kind, exec.group_steps[static_cast<std::size_t>(step)], alone.buffer_bytes);
        ASSERT_TRUE(searched) << "the search priced no step of collective #" << c->tag << "'s groups";
        EXPECT_DOUBLE_EQ(durations->collective(*c, bytes), *searched) << "collective #" << c->tag;
        ++checked;
        shared += *searched > alone_model.step_time(alone) * (1 + 1e-9);
      }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(shared, 0);  // some steps' groups share a NIC: priced alone, they would be faster
}

}  // namespace
}  // namespace loom::sim
