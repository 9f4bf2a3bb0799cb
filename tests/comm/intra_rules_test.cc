#include "loom/comm/intra_rules.h"

#include <gtest/gtest.h>

#include "loom/comm/factor_shift.h"

namespace loom::comm {
namespace {

Layout parse(std::string_view text) { return parse_layout(text).value(); }
const TensorSpec kTensor{ir::Shape{64, 32}, ir::DType::f32};  // 8 KiB

TEST(ShiftFactor, InnerSubIndexMovesAndFormsGroups) {
  // V(4)D(2,1) on 0-7: position = v·2 + c0. All-reduce over k=2 pairs value parts 2b and 2b+1.
  FactorShift s = shift_factor(parse("R(1)V(4)D(2,1)@0-7"), kAxisV, kAxisR, 2);
  EXPECT_EQ(to_string(s.after), "R(2)V(2)D(2,1)@0,1,4,5,2,3,6,7");
  EXPECT_EQ(s.groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

TEST(AllReduceVToR, GroupsHoldValuePartsOfOneChunk) {
  Transition t = all_reduce_v_to_r(parse("R(1)V(2)D(1,2)@0-3"), kTensor, 2).value();  // SuperScaler Figure 11
  EXPECT_EQ(t.after.r, 2);
  EXPECT_EQ(t.after.v, 1);
  EXPECT_EQ(t.step.primitive, Primitive::all_reduce);
  EXPECT_EQ(t.step.groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(t.step.buffer_bytes, 4096);
  EXPECT_EQ(t.step.bytes_per_device, 4096);  // 2(n−1)/n·S with n = 2
  EXPECT_FALSE(all_reduce_v_to_r(parse("R(1)V(2)D(1,2)@0-3"), kTensor, 4).has_value());
}

TEST(AllGatherDToR, GathersNeighbouringChunks) {
  Transition t = all_gather_d_to_r(parse("R(1)V(1)D(4,1)@0-3"), kTensor, 0, 2).value();
  EXPECT_EQ(to_string(t.after), "R(2)V(1)D(2,1)@0,2,1,3");
  EXPECT_EQ(t.step.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(t.step.buffer_bytes, 4096);        // output per device
  EXPECT_EQ(t.step.bytes_per_device, 2048);    // (n−1)/n·S
}

TEST(ReduceScatterVToD, EachMemberKeepsOneSubChunk) {
  Transition t = reduce_scatter_v_to_d(parse("R(1)V(4)D(1,1)@0-3"), kTensor, 1, 4).value();
  EXPECT_EQ(to_string(t.after), "R(1)V(1)D(1,4)@0-3");
  EXPECT_EQ(t.step.groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(t.step.bytes_per_device, 8192 * 3 / 4);
  EXPECT_FALSE(reduce_scatter_v_to_d(parse("R(1)V(4)D(1,1)@0-3"), TensorSpec{ir::Shape{64, 30}}, 1, 4).has_value());
}

TEST(AllToAllDToD, MovesTheSplitBetweenDimensions) {
  Transition t = all_to_all_d_to_d(parse("R(2)V(1)D(1,2)@0-3"), kTensor, 1, 0, 2).value();  // Figure 11, second step
  EXPECT_EQ(t.after.d, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(t.step.primitive, Primitive::all_to_all);
  EXPECT_EQ(t.step.groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(t.step.bytes_per_device, 2048);
  EXPECT_FALSE(all_to_all_d_to_d(parse("R(2)V(1)D(1,2)@0-3"), kTensor, 1, 1, 2).has_value());
}

TEST(LocalChunkRToD, NoCommunication) {
  Transition t = local_chunk_r_to_d(parse("R(4)V(1)D(1,1)@0-3"), kTensor, 0, 4).value();
  EXPECT_EQ(to_string(t.after), "R(1)V(1)D(4,1)@0-3");
  EXPECT_EQ(t.step.primitive, Primitive::local_chunk);
  EXPECT_EQ(t.step.bytes_per_device, 0);
}

TEST(LocalValueSplitRToV, NoCommunication) {
  Transition t = local_value_split_r_to_v(parse("R(2)V(1)D(1,1)@0,1"), kTensor, 2).value();
  EXPECT_EQ(t.after.v, 2);
  EXPECT_EQ(t.after.r, 1);
  EXPECT_EQ(t.step.primitive, Primitive::local_value_split);
}

TEST(IntraTransitions, EveryResultIsAValidLayoutOnTheSameDevices) {
  const Layout from = parse("R(2)V(2)D(2,1)@0-7");
  const std::vector<Transition> all = intra_transitions(from, kTensor);
  EXPECT_GE(all.size(), 6u);
  for (const Transition& t : all) {
    EXPECT_TRUE(validate(t.after, kTensor).has_value()) << t.step.rule;
    EXPECT_EQ(device_set(t.after), device_set(from)) << t.step.rule;
    for (const auto& g : t.step.groups)
      for (int dev : g) EXPECT_GE(dev, 0) << t.step.rule;
  }
}

}  // namespace
}  // namespace loom::comm
