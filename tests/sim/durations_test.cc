// model_durations against the closed forms of the models it wraps (comm/cost_model.h, REFERENCE.md's ring
// formulas): the exact group of a collective decides its link tier, all-gather prices the gathered size,
// p2p the link between the pair, locals are copies at HBM bandwidth, computes are the ComputeModel's.
#include "loom/sim/durations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "../exec/exec_test_plans.h"
#include "testing/policy_plans.h"
#include "loom/cluster/presets.h"
#include "loom/ops/registry.h"

namespace loom::sim {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr double kLaunch = 8e-6;  // CommCostOptions::launch_latency

struct Models {
  std::unique_ptr<exec::testing::Fixture> f = exec::testing::data_parallel(2);
  cluster::Cluster cluster = cluster::make_cluster("dgx-a100x2").value();
  cost::ComputeModel compute = cost::ComputeModel::make(f->plan, ops::builtin_ops(), cluster.gpu, nullptr,
                                                        {.launch_seconds = 5e-6})
                                   .value();
  Durations durations = model_durations(f->exec, compute, cluster).value();
};

std::vector<int> devices(int first, int count) {
  std::vector<int> group(static_cast<std::size_t>(count));
  std::iota(group.begin(), group.end(), first);
  return group;
}

exec::Collective collective(comm::Primitive kind, std::vector<int> group) {
  return {.kind = kind, .group = std::move(group), .tag = 0, .input = exec::kNoBuffer, .output = exec::kNoBuffer};
}

// Ring all-reduce inside a node: L + 2(n-1) alpha + 2(n-1)/n S / beta over NVSwitch (the ring beats the
// tree at 1 GiB).
TEST(ModelDurations, AllReduceInsideANodeIsTheRingFormula) {
  Models s;
  const double S = 1024.0 * kMiB, n = 8;
  const auto& link = s.cluster.intra;
  const double expected = kLaunch + 2 * (n - 1) * link.latency + 2 * (n - 1) / n * S / link.bandwidth;
  EXPECT_NEAR(s.durations.collective(collective(comm::Primitive::all_reduce, devices(0, 8)), 1024 * kMiB), expected,
              expected * 1e-12);
  // Any node's eight GPUs: the same time.
  EXPECT_EQ(s.durations.collective(collective(comm::Primitive::all_reduce, devices(8, 8)), 1024 * kMiB),
            s.durations.collective(collective(comm::Primitive::all_reduce, devices(0, 8)), 1024 * kMiB));
}

// The exact group decides the tier: {0, 1} shares a node, {0, 8} crosses to the next over one NIC.
TEST(ModelDurations, AGroupAcrossNodesRunsOnTheNetwork) {
  Models s;
  const double S = 64.0 * kMiB;
  const double inside = s.durations.collective(collective(comm::Primitive::all_reduce, {0, 1}), 64 * kMiB);
  const double across = s.durations.collective(collective(comm::Primitive::all_reduce, {0, 8}), 64 * kMiB);
  EXPECT_NEAR(inside, kLaunch + 2 * s.cluster.intra.latency + S / s.cluster.intra.bandwidth, 1e-15);
  EXPECT_NEAR(across, kLaunch + 2 * s.cluster.inter.latency + S / s.cluster.nic_bandwidth, 1e-15);
  EXPECT_GT(across, 5 * inside);
}

// All-gather's S is the gathered output: eight 1 MiB inputs gather 8 MiB, of which each member sends 7/8.
TEST(ModelDurations, AllGatherPricesTheGatheredSize) {
  Models s;
  const auto& link = s.cluster.intra;
  const double gathered = 8.0 * kMiB;
  const double expected = kLaunch + 7 * link.latency + 7.0 / 8 * gathered / link.bandwidth;
  EXPECT_NEAR(s.durations.collective(collective(comm::Primitive::all_gather, devices(0, 8)), kMiB), expected, 1e-15);
  // Reduce-scatter of the 8 MiB input moves the same.
  EXPECT_NEAR(s.durations.collective(collective(comm::Primitive::reduce_scatter, devices(0, 8)), 8 * kMiB), expected,
              1e-15);
  EXPECT_NEAR(s.durations.collective(collective(comm::Primitive::all_to_all, devices(0, 8)), 8 * kMiB), expected, 1e-15);
  // collective_step states the same S and per-member bytes.
  const comm::Step step = collective_step(s.f->exec, collective(comm::Primitive::all_gather, devices(0, 8)), kMiB);
  EXPECT_EQ(step.buffer_bytes, 8 * kMiB);
  EXPECT_EQ(step.bytes_per_device, 7 * kMiB);
  EXPECT_EQ(collective_step(s.f->exec, collective(comm::Primitive::all_reduce, devices(0, 4)), 4 * kMiB).bytes_per_device,
            6 * kMiB);
}

TEST(ModelDurations, PointToPointUsesTheLinkBetweenThePair) {
  Models s;
  const double b = 16.0 * kMiB;
  EXPECT_NEAR(s.durations.p2p(0, 1, 16 * kMiB), kLaunch + s.cluster.intra.latency + b / s.cluster.intra.bandwidth, 1e-15);
  EXPECT_NEAR(s.durations.p2p(0, 9, 16 * kMiB), kLaunch + s.cluster.inter.latency + b / s.cluster.nic_bandwidth, 1e-15);
  EXPECT_EQ(s.durations.p2p(3, 4, 0), 0);  // nothing moved, nothing launched
}

// A slice reads what it keeps and writes it; a combine reads every input; each at the compute model's
// bandwidth efficiency for its kind of kernel.
TEST(ModelDurations, LocalsAreCopiesAtMemoryBandwidth) {
  Models s;
  const plan::SubTensor piece = plan::SubTensor::whole(ir::TensorId(3), ir::Shape{});
  const exec::BufferId big = s.f->exec.add_buffer(0, piece, 4 * kMiB);
  const exec::BufferId a = s.f->exec.add_buffer(0, piece, kMiB);
  const exec::BufferId b = s.f->exec.add_buffer(0, piece, kMiB);
  const double copy = s.cluster.gpu.memory_bandwidth * s.compute.constants().bandwidth_efficiency(ir::OpClass::data_movement);
  const double elementwise =
      s.cluster.gpu.memory_bandwidth * s.compute.constants().bandwidth_efficiency(ir::OpClass::elementwise);
  const exec::Local slice{exec::LocalKind::slice, {big}, a};
  EXPECT_NEAR(s.durations.local(slice, kMiB), 5e-6 + 2.0 * kMiB / copy, 1e-15);
  const exec::Local combine{exec::LocalKind::combine, {a, b}, big};
  EXPECT_NEAR(s.durations.local(combine, 2 * kMiB), 5e-6 + 4.0 * kMiB / copy, 1e-15);
  const exec::Local scale{exec::LocalKind::scale, {a}, b};
  EXPECT_NEAR(s.durations.local(scale, kMiB), 5e-6 + 2.0 * kMiB / elementwise, 1e-15);
}

TEST(ModelDurations, ComputesAreTheComputeModels) {
  Models s;
  for (const auto& program : s.f->exec.programs)
    for (const auto& instruction : program)
      if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
        EXPECT_EQ(s.durations.compute(s.f->plan.sub_op(c->sub_op), 0), s.compute.seconds(c->sub_op));
        EXPECT_GT(s.durations.compute(s.f->plan.sub_op(c->sub_op), 0), 0);
      }
}

// The cache by (op, local shapes) answers what the ComputeModel would, on every compute of a policy plan
// whose parts share their shapes across replicas, tensor-parallel peers and micro-batches.
TEST(ModelDurations, CachedComputesAreTheComputeModelsOnAPolicyPlan) {
  const auto p = exec::testing::policy_plan(exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::bf16), "megatron",
                                            {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2});
  const cluster::Cluster cluster = cluster::make_cluster("dgx-a100").value();
  const cost::ComputeModel compute = cost::ComputeModel::make(p->plan, ops::builtin_ops(), cluster.gpu).value();
  const Durations durations = model_durations(p->exec, compute, cluster).value();
  std::size_t checked = 0;
  for (int d = 0; d < p->exec.num_devices; ++d)
    for (const auto& instruction : p->exec.programs[static_cast<std::size_t>(d)])
      if (const auto* c = std::get_if<exec::Compute>(&instruction)) {
        ASSERT_EQ(durations.compute(p->plan.sub_op(c->sub_op), d), compute.seconds(c->sub_op)) << p->plan.sub_op(c->sub_op).name;
        ++checked;
      }
  EXPECT_GT(checked, 500u);
}

// Processes sharing cores (cluster::SharedCores) with a transfer's own α-β: a transfer costs L + p2p_latency +
// bytes / p2p_bandwidth, whatever the link, collectives the link's price, both slowed by comm_sharing's
// slowdown, plus the instruction overhead slowed by core_sharing's; a device outside the cluster gives NaN.
TEST(ModelDurations, SharedCoresPriceTransfersByTheirOwnAlphaBeta) {
  Models s;
  cluster::Cluster shared = s.cluster;
  shared.shared = {.cores = 1, .core_sharing = 0.5, .time_scale = 1, .instruction_overhead = 1e-5,
                   .comm_sharing = 0.25, .p2p_latency = 3e-4, .p2p_bandwidth = 2e9};
  const Durations d = model_durations(s.f->exec, s.compute, shared).value();
  const double slowdown = 1 + 0.5 * (2 - 1) / 1.0;  // the plan's 2 processes on 1 core
  const double comm = 1 + 0.25 * (2 - 1) / 1.0;
  for (const auto& [src, dst] : std::vector<std::pair<int, int>>{{0, 1}, {0, 8}})
    EXPECT_NEAR(d.p2p(src, dst, 64 * kMiB), comm * (kLaunch + 3e-4 + 64.0 * kMiB / 2e9) + slowdown * 1e-5, 1e-12);
  const exec::Collective ring = collective(comm::Primitive::all_reduce, devices(0, 8));
  EXPECT_NEAR(d.collective(ring, kMiB), comm * s.durations.collective(ring, kMiB) + slowdown * 1e-5, 1e-12);
  EXPECT_TRUE(std::isnan(d.p2p(0, 99, kMiB)));
  shared.shared.p2p_bandwidth = 0;  // unset: the link's price
  shared.shared.comm_sharing = 0;   // communication unslowed by the sharing
  const Durations link = model_durations(s.f->exec, s.compute, shared).value();
  EXPECT_NEAR(link.p2p(0, 1, kMiB), s.durations.p2p(0, 1, kMiB) + slowdown * 1e-5, 1e-12);
  EXPECT_NEAR(link.collective(ring, kMiB), s.durations.collective(ring, kMiB) + slowdown * 1e-5, 1e-12);
}

// An all-gather's and a reduce-scatter's own α-β (gloo runs each by its own algorithm): one ring pass over the
// group, L + (n−1)·α + (n−1)/n·S/β with S the whole (an all-gather's gathered size, a reduce-scatter's input),
// slowed by comm_sharing, for random constants and groups; all-reduces keep the link's price, and a kind
// without its own bandwidth the link's too; every collective adds collective_overhead.
TEST(ModelDurations, SharedCoresPriceGathersAndScattersByTheirOwnAlphaBeta) {
  Models s;
  std::mt19937 rng(41);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int round = 0; round < 50; ++round) {
    cluster::Cluster shared = s.cluster;
    const double ag_alpha = 1e-5 * (1 + 100 * unit(rng)), ag_beta = 1e8 * (1 + 100 * unit(rng));
    const double rs_alpha = 1e-5 * (1 + 100 * unit(rng)), rs_beta = 1e8 * (1 + 100 * unit(rng));
    const double gamma = 2 * unit(rng), overhead = 1e-4 * unit(rng);
    const double call = 1e-3 * unit(rng);
    shared.shared = {.cores = 1, .core_sharing = 1, .time_scale = 1, .instruction_overhead = overhead,
                     .comm_sharing = gamma, .p2p_latency = 0, .p2p_bandwidth = 0, .all_gather_latency = ag_alpha,
                     .all_gather_bandwidth = ag_beta, .reduce_scatter_latency = rs_alpha,
                     .reduce_scatter_bandwidth = rs_beta, .collective_overhead = call};
    const Durations d = model_durations(s.f->exec, s.compute, shared).value();
    const double comm = 1 + gamma * (2 - 1) / 1.0, extra = (1 + 1.0 * (2 - 1) / 1.0) * overhead;
    const int n = 2 + static_cast<int>(unit(rng) * 7);  // 2..8 of one node
    const std::int64_t bytes = static_cast<std::int64_t>(1 + unit(rng) * 64 * kMiB);
    const double hops = n - 1;
    // Each member sends (n − 1)/n of the whole, in whole bytes; an all-gather's whole is n inputs (no output
    // buffer named), a reduce-scatter's its input.
    const auto sent = [n](std::int64_t whole) { return static_cast<double>((n - 1) * whole / n); };
    const exec::Collective gather = collective(comm::Primitive::all_gather, devices(0, n));
    const double gathered = comm * (kLaunch + hops * ag_alpha + sent(bytes * n) / ag_beta + call) + extra;
    EXPECT_NEAR(d.collective(gather, bytes), gathered, gathered * 1e-12);
    const exec::Collective scatter = collective(comm::Primitive::reduce_scatter, devices(0, n));
    const double scattered = comm * (kLaunch + hops * rs_alpha + sent(bytes) / rs_beta + call) + extra;
    EXPECT_NEAR(d.collective(scatter, bytes), scattered, scattered * 1e-12);
    const exec::Collective ring = collective(comm::Primitive::all_reduce, devices(0, n));
    EXPECT_NEAR(d.collective(ring, bytes), comm * (s.durations.collective(ring, bytes) + call) + extra, 1e-12);
    shared.shared.all_gather_bandwidth = shared.shared.all_gather_latency = 0;
    const Durations link = model_durations(s.f->exec, s.compute, shared).value();
    EXPECT_NEAR(link.collective(gather, bytes), comm * (s.durations.collective(gather, bytes) + call) + extra, 1e-12);
  }
}

// A step of k concurrent pairs across two nodes of one NIC each (the middle step of a tp-16 all-reduce over
// two servers: pair i = {i, 8 + i}, each member sending S): each pair's collective is priced as the whole
// step, the k pairs' bytes crossing each node's one NIC, L + max(2 alpha + S / nic, k S / nic); the same
// pair under a tag without a step (or whose step does not hold its group) prices its own ring,
// L + 2 alpha + S / nic, as before.
TEST(ModelDurations, SiblingPairsShareTheirNodesNic) {
  Models s;
  cluster::Cluster one_nic = s.cluster;
  one_nic.nics_per_node = 1;
  one_nic.inter.bandwidth = one_nic.node_nic_bandwidth() / one_nic.gpus_per_node;
  const double S = 64.0 * kMiB, alpha = one_nic.inter.latency, nic = one_nic.nic_bandwidth;
  const double own_ring = 2 * alpha + S / nic;
  for (int k = 1; k <= 8; ++k) {
    SCOPED_TRACE(k);
    exec::ExecPlan exec = s.f->exec;
    std::vector<std::vector<int>> pairs;
    for (int i = 0; i < k; ++i) pairs.push_back({8 + i, i});  // stored ascending
    const std::int64_t step = exec.add_group_step(pairs);
    EXPECT_EQ(step >= 0, k > 1);  // one group is no step
    const std::int64_t shared = exec.add_tag({.tensor = {}, .rule = "V->R all-reduce", .paired = -1, .step = step});
    const std::int64_t alone = exec.add_tag({.tensor = {}, .rule = "V->R all-reduce", .paired = -1, .step = -1});
    const Durations d = model_durations(exec, s.compute, one_nic).value();
    const double expected = kLaunch + std::max(own_ring, k * S / nic);
    for (int i = 0; i < k; ++i) {
      exec::Collective pair = collective(comm::Primitive::all_reduce, {i, 8 + i});
      pair.tag = shared;
      EXPECT_NEAR(d.collective(pair, 64 * kMiB), expected, expected * 1e-12) << "pair " << i;
      pair.tag = alone;
      EXPECT_NEAR(d.collective(pair, 64 * kMiB), kLaunch + own_ring, 1e-15) << "pair " << i;
    }
    exec::Collective stranger = collective(comm::Primitive::all_reduce, {0, 9});
    stranger.tag = shared;
    EXPECT_NEAR(d.collective(stranger, 64 * kMiB), kLaunch + own_ring, 1e-15);
  }
}

// The hooks price a whole plan: a simulation of the hand-built data-parallel plan runs with them.
TEST(ModelDurations, SimulateWithThem) {
  Models s;
  auto result = simulate(s.f->exec, s.durations);
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_GT(result->step_time, 0);
  EXPECT_GT(result->devices[0].communication, kLaunch);
}

TEST(ModelDurations, RejectsMismatchedInputs) {
  Models s;
  const cluster::Cluster small = cluster::make_cluster("rtx3090").value();
  auto other_gpu = model_durations(s.f->exec, s.compute, small);
  ASSERT_FALSE(other_gpu);
  EXPECT_THAT(other_gpu.error().message, HasSubstr("the compute model prices a"));
  cluster::Cluster one = s.cluster;
  one.nodes = 1;
  one.gpus_per_node = 1;
  auto too_few = model_durations(s.f->exec, s.compute, one);
  ASSERT_FALSE(too_few);
  EXPECT_THAT(too_few.error().message, HasSubstr("runs on 2 devices but cluster dgx-a100x2 has 1"));
  auto contention = model_durations(s.f->exec, s.compute, s.cluster, {.comm = {}, .contention = 0.5});
  ASSERT_FALSE(contention);
  EXPECT_THAT(contention.error().hint, HasSubstr("1 (none) or more"));
  // A group outside the cluster gives NaN, which the simulator reports with the instruction.
  EXPECT_TRUE(std::isnan(s.durations.collective(collective(comm::Primitive::all_reduce, {0, 99}), kMiB)));
}

}  // namespace
}  // namespace loom::sim
