#include "loom/core/error.h"

#include <gtest/gtest.h>

#include "loom/core/strings.h"

namespace loom {
namespace {

Expected<int> parse_positive(int v) {
  if (v <= 0) return failf("value {} is not positive", v);
  return v;
}

Expected<int> twice_positive(int v) {
  LOOM_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

TEST(Error, AssignOrReturnPropagatesTheError) {
  EXPECT_EQ(twice_positive(3).value(), 6);
  Expected<int> bad = twice_positive(-1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "value -1 is not positive");
}

TEST(Error, WithContextPrefixesTheMessage) {
  Expected<int> bad = with_context(parse_positive(0), "in option --batch");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "in option --batch: value 0 is not positive");
}

TEST(Error, WithContextSaysAContextOnce) {
  const Error inner{"policy 'megatron': tp 3 does not divide 8 heads", "use tp 2"};
  EXPECT_EQ(with_context(inner, "policy 'megatron'").message, inner.message);
  EXPECT_EQ(with_context(Error{"model 'swin-1.8b' has no vocabulary", ""}, "model").message,
            "model 'swin-1.8b' has no vocabulary");
  // Only whole words count: "models ..." is not already in the context "model".
  EXPECT_EQ(with_context(Error{"models differ", ""}, "model").message, "model: models differ");
  EXPECT_EQ(with_context(Error{"bad", ""}, "in op 'x'").message, "in op 'x': bad");
}

TEST(Error, ToStringAddsTheHint) {
  EXPECT_EQ((Error{"bad", "do this"}).to_string(), "bad (hint: do this)");
  EXPECT_EQ((Error{"bad", ""}).to_string(), "bad");
}

TEST(Strings, HumanUnits) {
  EXPECT_EQ(human_count(125'000'000), "125.00M");
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_bytes(12), "12 B");
}

TEST(Strings, SplitJoinTrim) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(join({"a", "b"}, ", "), "a, b");
  EXPECT_EQ(trim("  x y \n"), "x y");
}

}  // namespace
}  // namespace loom
