// api/job_options.h: the one keyword table the CLI's flags and the Python keywords come from.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "loom/api/job_options.h"

namespace loom::api {
namespace {

TEST(JobOptions, EveryFieldHasOneKeywordOneFlagAndRoundTripsItsDefault) {
  const JobOptions defaults;
  std::set<std::string_view> names;
  for (const OptionField& f : option_fields()) {
    SCOPED_TRACE(f.keyword);
    EXPECT_TRUE(f.flag.starts_with("--"));
    EXPECT_FALSE(f.keyword.starts_with("-"));
    EXPECT_TRUE(names.insert(f.keyword).second) << "keyword used twice";
    EXPECT_TRUE(names.insert(f.flag).second) << "flag used twice";
    for (std::string_view alias : f.aliases) EXPECT_TRUE(names.insert(alias).second) << alias;
    EXPECT_EQ(find_option(f.keyword), &f);
    EXPECT_EQ(find_option(f.flag), &f);
    // The default, printed and parsed back, is the default (fields whose default 0 means "not given"
    // refuse 0 as a value: that is checked below; --arch's sizes print nothing when not given).
    const std::string text = f.get(defaults);
    JobOptions parsed;
    if ((f.kind == ValueKind::whole && text == "0") || (f.kind != ValueKind::text && text.empty())) continue;
    ASSERT_TRUE(f.set(parsed, text)) << text;
    EXPECT_EQ(f.get(parsed), text);
  }
}

TEST(JobOptions, ValuesParseStrictlyAndErrorsNameTheOption) {
  JobOptions o;
  ASSERT_TRUE(set_option(o, "--tp", "4"));
  EXPECT_EQ(o.tp, 4);
  ASSERT_TRUE(set_option(o, "micro_batch_size", "2"));
  EXPECT_EQ(o.micro_batch_size, 2);
  ASSERT_TRUE(set_option(o, "--batch", "64"));  // an alias
  EXPECT_EQ(o.global_batch, 64);
  ASSERT_TRUE(set_option(o, "lr", "3e-4"));
  EXPECT_DOUBLE_EQ(o.optimizer.lr, 3e-4);
  ASSERT_TRUE(set_option(o, "--sp", "true"));
  EXPECT_TRUE(o.sequence_parallel);
  ASSERT_TRUE(set_option(o, "--schedule", "gpipe"));
  EXPECT_EQ(o.schedule, plan::ScheduleKind::gpipe);

  const auto error_of = [&](std::string_view name, std::string_view text) {
    const auto r = set_option(o, name, text);
    return r ? std::string("(accepted)") : r.error().message;
  };
  EXPECT_EQ(error_of("--tp", "2 "), "option --tp: '2 ' is not an integer");
  EXPECT_EQ(error_of("--seq", "1e3"), "option --seq: '1e3' is not an integer");
  EXPECT_EQ(error_of("--tp", "0"), "option --tp: 0 is outside [1, 1048576]");
  EXPECT_EQ(error_of("zero", "4"), "keyword zero: 4 is outside [0, 3]");
  EXPECT_EQ(error_of("--lr", "inf"), "option --lr: 'inf' is not a finite number");
  EXPECT_EQ(error_of("--momentum", "5"), "option --momentum: 5 is outside [0, 1]");
  EXPECT_EQ(error_of("--sp", "yes"), "option --sp: 'yes' is not true or false");
  EXPECT_NE(error_of("--dtype", "f8").find("option --dtype"), std::string::npos);
  EXPECT_NE(error_of("--recompute", "partial").find("option --recompute"), std::string::npos);
  EXPECT_EQ(error_of("--frobnicate", "1"), "unknown option --frobnicate");
}

// Random whole numbers: those in a field's range parse to themselves, the others are refused.
TEST(JobOptions, WholeNumbersInRangeAndOnlyThoseAreAccepted) {
  std::mt19937_64 random(7);
  std::uniform_int_distribution<std::int64_t> value(-5, 5'000'000);
  for (int i = 0; i < 2000; ++i) {
    const std::int64_t v = value(random);
    JobOptions o;
    const auto r = set_option(o, "--dp", std::to_string(v));
    EXPECT_EQ(r.has_value(), v >= 1 && v <= (1 << 20)) << v;
    if (r) {
      EXPECT_EQ(o.dp, v);
    }
  }
}

}  // namespace
}  // namespace loom::api
