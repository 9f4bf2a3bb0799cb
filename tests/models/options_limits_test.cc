#include <gtest/gtest.h>

#include "loom/models/zoo.h"

namespace loom::models {
namespace {

TEST(ModelOptions, LimitsAndDtypesAreChecked) {
  ModelOptions deep;
  deep.layers = kMaxLayers + 1;
  auto too_deep = build_model("gpt3-125m", deep);
  ASSERT_FALSE(too_deep);
  EXPECT_NE(too_deep.error().message.find("over Loom's limit of 1024"), std::string::npos) << too_deep.error().message;

  ModelOptions wide;
  wide.batch = std::int64_t{1} << 40;
  EXPECT_FALSE(build_model("gpt3-125m", wide));

  ModelOptions integer;
  integer.dtype = ir::DType::i64;
  auto not_floating = build_model("gpt3-125m", integer);
  ASSERT_FALSE(not_floating);
  EXPECT_NE(not_floating.error().message.find("not a floating type"), std::string::npos);
}

}  // namespace
}  // namespace loom::models
