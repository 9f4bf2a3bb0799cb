#include "loom/comm/inter_rules.h"

#include <gtest/gtest.h>

#include "loom/cluster/presets.h"
#include "loom/comm/p2p_fetch.h"

namespace loom::comm {
namespace {

Layout parse(std::string_view text) { return parse_layout(text).value(); }
const TensorSpec kTensor{ir::Shape{1024}, ir::DType::f32};  // 4 KiB
const cluster::Cluster kCluster = cluster::make_cluster("v100x8x2").value();
const std::vector<int> kServer2 = {8, 9, 10, 11, 12, 13, 14, 15};

std::int64_t total(const Step& s) {
  std::int64_t n = 0;
  for (const Transfer& t : s.transfers) n += t.bytes;
  return n;
}

TEST(MoveLayout, OnePiecePerSend) {
  Transition t = move_layout(parse("R(1)V(1)D(8)@0-7"), kTensor, kServer2, kCluster).value();
  EXPECT_EQ(to_string(t.after), "R(1)V(1)D(8)@8-15");
  ASSERT_EQ(t.step.transfers.size(), 8u);
  EXPECT_EQ(t.step.transfers[3], (Transfer{3, 11, 512}));
}

TEST(RdScatter, EachProducerSendsKSubChunks) {  // SuperScaler Figure 18 (a), middle step
  Transition t = rd_scatter(parse("R(1)V(1)D(4)@0-3"), kTensor, kServer2, 0, 2, kCluster).value();
  EXPECT_EQ(t.after.d, (std::vector<std::int64_t>{8}));
  EXPECT_EQ(t.step.transfers.size(), 8u);
  EXPECT_EQ(total(t.step), 4096);  // the tensor crosses once
  EXPECT_EQ(t.step.transfers[1], (Transfer{0, 9, 512}));
}

TEST(Broadcast, EveryPieceGoesToKTargets) {
  Transition t = broadcast_r(parse("R(4)V(1)D(1)@0-3"), kTensor, kServer2, 2, kCluster).value();
  EXPECT_EQ(t.after.r, 8);
  EXPECT_EQ(total(t.step), 8 * 4096);
}

TEST(RdGather, TargetsConcatenateNeighbouringChunks) {
  Transition t = rd_gather(parse("R(1)V(1)D(8)@0-7"), kTensor, {8, 9, 10, 11}, 0, 2, kCluster).value();
  EXPECT_EQ(to_string(t.after), "R(1)V(1)D(4)@8-11");
  EXPECT_EQ(t.step.transfers[0], (Transfer{0, 8, 512}));
  EXPECT_EQ(t.step.transfers[1], (Transfer{1, 8, 512}));
}

TEST(RvGather, TargetsSumKValueParts) {
  Transition t = rv_gather(parse("R(1)V(8)D(1)@0-7"), kTensor, {8, 9, 10, 11}, 2, kCluster).value();
  EXPECT_EQ(t.after.v, 4);
  EXPECT_EQ(total(t.step), 8 * 4096);
  EXPECT_EQ(t.step.bytes_per_device, 2 * 4096);
}

TEST(PickReplicas, TakesOneReplicaPerTarget) {
  Transition t = pick_replicas(parse("R(8)V(1)D(1)@0-7"), kTensor, {8, 9, 10, 11}, 2, kCluster).value();
  EXPECT_EQ(t.after.r, 4);
  EXPECT_EQ(total(t.step), 4 * 4096);
}

TEST(InterRules, PreconditionsOnDeviceCounts) {
  EXPECT_FALSE(move_layout(parse("R(1)V(1)D(4)@0-3"), kTensor, kServer2, kCluster).has_value());
  EXPECT_FALSE(rd_gather(parse("R(8)V(1)D(1)@0-7"), kTensor, {8, 9, 10, 11}, 0, 2, kCluster).has_value());
  EXPECT_EQ(inter_transitions(parse("R(1)V(1)D(8)@0-7"), kTensor, {8, 9, 10}, kCluster).size(), 0u);
}

TEST(P2pFetch, ValuePartsAreSummedAtTheConsumer) {
  const Step s = p2p_fetch(parse("R(1)V(8)D(1)@0-7"), parse("R(1)V(1)D(8)@8-15"), kTensor, kCluster);
  EXPECT_EQ(s.transfers.size(), 64u);  // every consumer fetches its chunk from all 8 parts
  EXPECT_EQ(total(s), 8 * 4096);
}

TEST(P2pFetch, SpreadsLoadOverReplicasAndSkipsOwnPieces) {
  const Step s = p2p_fetch(parse("R(8)V(1)D(1)@0-7"), parse("R(8)V(1)D(1)@8-15"), kTensor, kCluster);
  std::set<int> sources;
  for (const Transfer& t : s.transfers) sources.insert(t.src);
  EXPECT_EQ(sources.size(), 8u);
  const Step local = p2p_fetch(parse("R(1)V(1)D(4)@0-3"), parse("R(4)V(1)D(1)@0-3"), kTensor, kCluster);
  EXPECT_EQ(local.transfers.size(), 12u);  // each device already holds one of its four chunks
}

}  // namespace
}  // namespace loom::comm
