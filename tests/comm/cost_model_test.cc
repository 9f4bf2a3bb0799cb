#include "loom/comm/cost_model.h"

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"

namespace loom::comm {
namespace {

cluster::Cluster v100x8x2() { return cluster::make_cluster("v100x8x2").value(); }
constexpr double kNvlink = 150e9, kNic = 12.5e9, kAlphaNv = 1e-6, kAlphaIb = 5e-6, kLaunch = 8e-6;

Step collective(Primitive p, std::vector<std::vector<int>> groups, std::int64_t s, std::int64_t moved) {
  return Step{"test", p, std::move(groups), s, moved, {}};
}

TEST(AlphaBetaCostModel, RingAllReduceInsideANode) {
  const AlphaBetaCostModel model(v100x8x2());
  const std::int64_t s = 8'000'000;
  const Step step = collective(Primitive::all_reduce, {{0, 1, 2, 3, 4, 5, 6, 7}}, s, 2 * 7 * s / 8);
  EXPECT_DOUBLE_EQ(model.step_time(step), kLaunch + 14 * kAlphaNv + (2.0 * 7 * s / 8) / kNvlink);
}

TEST(AlphaBetaCostModel, ConcurrentGroupsTakeTheLongest) {
  const AlphaBetaCostModel model(v100x8x2());
  const Step one = collective(Primitive::all_gather, {{0, 1}}, 1'000'000, 500'000);
  const Step two = collective(Primitive::all_gather, {{0, 1}, {2, 3}}, 1'000'000, 500'000);
  EXPECT_DOUBLE_EQ(model.step_time(one), model.step_time(two));
}

TEST(AlphaBetaCostModel, GroupAcrossNodesIsBoundByTheNic) {
  const AlphaBetaCostModel shared(v100x8x2());
  const Step step = collective(Primitive::all_gather, {{0, 8}}, 2'000'000, 1'000'000);
  EXPECT_DOUBLE_EQ(shared.step_time(step), kLaunch + kAlphaIb + 1e6 / kNic);
  // Without NIC sharing every crossing runs at the per-GPU share, 1/8 of the node's NIC.
  const AlphaBetaCostModel per_gpu(v100x8x2(), {.share_nics = false});
  EXPECT_DOUBLE_EQ(per_gpu.step_time(step), kLaunch + kAlphaIb + 1e6 / (kNic / 8));
}

// A ring spanning nodes runs as NCCL's parallel channels, one per NIC the node has and the group has members
// to drive: 16 members on each of two DGX-2 nodes cross at the node's 8 NICs together (not at one NIC, the
// step's time then 1/8 of it); DGX-1 nodes have one NIC, so the same ring crosses at one; two members per
// node drive two of the DGX-2's NICs.
TEST(AlphaBetaCostModel, RingAcrossNodesCrossesAtEveryNicItsMembersDrive) {
  const std::int64_t s = 453'000'000;
  const auto ring = [&](int first, int count) {
    std::vector<int> members;
    for (int d = first; d < first + count; ++d) members.push_back(d);
    return members;
  };
  const auto all_reduce = [&](std::vector<int> members) {
    const auto n = static_cast<std::int64_t>(members.size());
    return collective(Primitive::all_reduce, {std::move(members)}, s, 2 * (n - 1) * s / n);
  };
  const auto dgx2 = cluster::make_cluster("dgx2x2").value(), dgx1 = cluster::make_cluster("dgx1x4").value();
  ASSERT_EQ(dgx2.nics_per_node, 8);
  ASSERT_EQ(dgx1.nics_per_node, 1);
  const double moved = 2.0 * 31 * s / 32;
  EXPECT_DOUBLE_EQ(AlphaBetaCostModel(dgx2).step_time(all_reduce(ring(0, 32))),
                   kLaunch + 62 * kAlphaIb + moved / (8 * dgx2.nic_bandwidth));
  EXPECT_DOUBLE_EQ(AlphaBetaCostModel(dgx1).step_time(all_reduce(ring(0, 32))),
                   kLaunch + 62 * kAlphaIb + moved / dgx1.nic_bandwidth);
  EXPECT_DOUBLE_EQ(AlphaBetaCostModel(dgx2).step_time(all_reduce({14, 15, 16, 17})),
                   kLaunch + 6 * kAlphaIb + (2.0 * 3 * s / 4) / (2 * dgx2.nic_bandwidth));
}

TEST(AlphaBetaCostModel, P2pSendsShareTheNodeNic) {
  const AlphaBetaCostModel model(v100x8x2());
  Step one{"p2p", Primitive::p2p, {}, 1'000'000, 1'000'000, {{0, 8, 1'000'000}}};
  EXPECT_DOUBLE_EQ(model.step_time(one), kLaunch + kAlphaIb + 1e6 / kNic);
  Step eight{"p2p", Primitive::p2p, {}, 8'000'000, 1'000'000, {}};
  for (int i = 0; i < 8; ++i) eight.transfers.push_back({i, 8 + i, 1'000'000});
  EXPECT_DOUBLE_EQ(model.step_time(eight), kLaunch + 8e6 / kNic);  // the NIC, not a device, is the bottleneck
  Step local{"p2p", Primitive::p2p, {}, 0, 0, {{3, 3, 1'000'000}}};
  EXPECT_DOUBLE_EQ(model.step_time(local), 0);
}

TEST(AlphaBetaCostModel, LaunchLatencyIsAnOption) {
  const AlphaBetaCostModel model(v100x8x2(), {.launch_latency = 0});
  const Step step = collective(Primitive::all_gather, {{0, 1}}, 2'000'000, 1'000'000);
  EXPECT_DOUBLE_EQ(model.step_time(step), kAlphaNv + 1e6 / kNvlink);
  EXPECT_NE(model.fingerprint(), AlphaBetaCostModel(v100x8x2()).fingerprint());
}

TEST(AlphaBetaCostModel, LocalStepsAreFree) {
  const AlphaBetaCostModel model(v100x8x2());
  EXPECT_DOUBLE_EQ(model.step_time(collective(Primitive::local_chunk, {{0, 1}}, 0, 0)), 0);
}

TEST(AlphaBetaCostModel, Rtx3090GroupSpanningPcieUsesPcie) {
  const AlphaBetaCostModel model(cluster::make_cluster("rtx3090-nvlink").value());
  const Step pair = collective(Primitive::all_reduce, {{0, 1}}, 1'000'000, 1'000'000);
  const Step quad = collective(Primitive::all_reduce, {{0, 1, 2, 3}}, 1'000'000, 1'500'000);
  EXPECT_DOUBLE_EQ(model.step_time(pair), kLaunch + 2 * 1e-6 + 1e6 / 56.25e9);
  // GPUs 1-2 and 0-3 talk over PCIe through host memory (no P2P on GeForce): two crossings per hop.
  EXPECT_DOUBLE_EQ(model.step_time(quad), kLaunch + 6 * 4e-6 + 1.5e6 / 15.75e9);
}

TEST(BytesPerTier, CountsEveryRingLinkAndTransfer) {
  const cluster::Cluster c = v100x8x2();
  const auto ring = bytes_per_tier(collective(Primitive::all_gather, {{0, 1, 8, 9}}, 4000, 3000), c);
  EXPECT_EQ(ring.at(cluster::LinkKind::nvlink), 2 * 3000);
  EXPECT_EQ(ring.at(cluster::LinkKind::infiniband), 2 * 3000);
  Step p2p{"p2p", Primitive::p2p, {}, 0, 0, {{0, 8, 100}, {1, 2, 50}, {4, 4, 70}}};
  const auto sends = bytes_per_tier(p2p, c);
  EXPECT_EQ(sends.at(cluster::LinkKind::infiniband), 100);
  EXPECT_EQ(sends.at(cluster::LinkKind::nvlink), 50);
  EXPECT_FALSE(sends.contains(cluster::LinkKind::local));
}

}  // namespace
}  // namespace loom::comm
