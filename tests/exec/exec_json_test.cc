#include "loom/exec/exec_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exec_test_plans.h"
#include "loom/exec/device_classes.h"

namespace loom::exec {
namespace {

using nlohmann::json;

TEST(ExecJson, OneProgramPerClassCoveringEveryDevice) {
  auto f = testing::data_parallel(4);
  assign_device_classes(f->exec);
  const std::string text = exec_to_json(f->exec);
  EXPECT_EQ(text, exec_to_json(f->exec));  // deterministic
  const json doc = json::parse(text);
  EXPECT_EQ(doc["format"], "loom-exec");
  EXPECT_EQ(doc["devices"], 4);
  std::vector<int> seen;
  for (const json& c : doc["classes"])
    for (const json& d : c["devices"]) seen.push_back(d.get<int>());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(doc["programs"].size(), f->exec.representatives.size());
  const json& program = doc["programs"][0];
  const auto device = program["device"].get<std::size_t>();
  EXPECT_EQ(program["instructions"].size(), f->exec.programs[device].size());
  EXPECT_EQ(program["instructions"][0]["op"], "load");
  bool all_reduce = false;
  for (const json& in : program["instructions"])
    if (in["op"] == "all-reduce") {
      all_reduce = true;
      EXPECT_EQ(in["tensor"], "loss");
      EXPECT_EQ(in["group"].size(), 4u);
    }
  EXPECT_TRUE(all_reduce);
}

TEST(ExecJson, PipelineShowsSendsAndRecvs) {
  auto f = testing::pipeline(1);
  const json doc = json::parse(exec_to_json(f->exec));  // classes computed on the fly
  int sends = 0, recvs = 0;
  for (const json& program : doc["programs"])
    for (const json& in : program["instructions"]) {
      sends += in["op"] == "send";
      recvs += in["op"] == "recv";
    }
  EXPECT_GT(sends, 0);
  EXPECT_EQ(sends, recvs);
}

}  // namespace
}  // namespace loom::exec
