#include "loom/exec/device_classes.h"

#include <gtest/gtest.h>

#include "exec_test_plans.h"

namespace loom::exec {
namespace {

using testing::data_parallel;
using testing::pipeline;

TEST(DeviceClasses, DataParallelReplicasShareOneClass) {
  auto f = data_parallel(4);
  assign_device_classes(f->exec);
  EXPECT_EQ(f->exec.class_of, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(f->exec.representatives, (std::vector<int>{0}));
}

TEST(DeviceClasses, PipelineStagesAreTwoClasses) {
  auto f = pipeline(2);  // devices 0, 1: stage 0; devices 2, 3: stage 1
  assign_device_classes(f->exec);
  EXPECT_EQ(f->exec.class_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(f->exec.representatives, (std::vector<int>{0, 2}));
}

TEST(DeviceClasses, ClassesAreNumberedByFirstDevice) {
  auto f = pipeline(1);
  std::swap(f->exec.programs[0], f->exec.programs[1]);  // the receiving stage first
  const DeviceClasses classes = device_classes(f->exec);
  EXPECT_EQ(classes.class_of, (std::vector<int>{0, 1}));
  EXPECT_EQ(classes.representatives, (std::vector<int>{0, 1}));
}

TEST(DeviceClasses, AnyDifferenceInKindsOrShapesSplitsAClass) {
  {
    auto f = data_parallel(4);
    f->exec.programs[2].pop_back();  // one free fewer
    EXPECT_EQ(device_classes(f->exec).class_of, (std::vector<int>{0, 0, 1, 0}));
  }
  {
    auto f = data_parallel(4);
    // Device 3 loads a smaller piece of w: same instruction kinds, another shape.
    const BufferId w = std::get<Load>(f->exec.programs[3][1]).output;
    f->exec.buffers[w.index()].piece.box[0] = {0, 4, 1};
    EXPECT_EQ(device_classes(f->exec).class_of, (std::vector<int>{0, 0, 0, 1}));
  }
  {
    auto f = data_parallel(2);
    std::get<Collective>(f->exec.programs[1][6]).kind = comm::Primitive::all_gather;
    EXPECT_EQ(device_classes(f->exec).representatives, (std::vector<int>{0, 1}));
  }
}

// ZeRO-3 shards gathered by a start: equal shards, one class; a start of another kind, or holding
// another shard's shape, is another class.
TEST(DeviceClasses, GatherStartsOfEqualShardsShareOneClass) {
  auto f = testing::gathered(4, /*async=*/true);
  EXPECT_EQ(device_classes(f->exec).representatives, (std::vector<int>{0}));
  std::get<CollectiveStart>(f->exec.programs[1][2]).kind = comm::Primitive::all_reduce;
  const BufferId shard = std::get<Load>(f->exec.programs[3][1]).output;
  f->exec.buffers[shard.index()].piece.box[0] = {6, 7, 1};
  EXPECT_EQ(device_classes(f->exec).class_of, (std::vector<int>{0, 1, 0, 2}));
}

TEST(DeviceClasses, DeviceIdsTagsAndBufferIdsAreNames) {
  // Two separate data-parallel pairs in one plan, with their own groups and tags: still one class.
  auto f = data_parallel(4);
  for (int d = 0; d < 4; ++d) {
    auto& c = std::get<Collective>(f->exec.programs[static_cast<std::size_t>(d)][6]);
    c.group = d < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    c.tag = d < 2 ? 0 : 5;
  }
  const DeviceClasses classes = device_classes(f->exec);
  EXPECT_EQ(classes.representatives, (std::vector<int>{0}));
}

}  // namespace
}  // namespace loom::exec
