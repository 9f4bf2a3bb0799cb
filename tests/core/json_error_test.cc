#include "loom/core/json_error.h"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(DescribeJsonError, PutsThePositionFirstInLoomsWords) {
  EXPECT_EQ(describe_json_error("[json.exception.parse_error.101] parse error at line 3, column 7: syntax error while "
                                "parsing value - unexpected '}'; expected '[', '{', or a literal"),
            "line 3 column 7: malformed JSON: syntax error while parsing value - unexpected '}'; expected '[', '{', "
            "or a literal");
}

TEST(DescribeJsonError, KeepsTheWordsOfAnErrorWithoutAPosition) {
  EXPECT_EQ(describe_json_error("[json.exception.parse_error.110] parse error at byte 4: unexpected end"),
            "malformed JSON: parse error at byte 4: unexpected end");
  EXPECT_EQ(describe_json_error("[json.exception.type_error.302] type must be string, but is number"),
            "malformed JSON: type must be string, but is number");
  EXPECT_EQ(describe_json_error("something else"), "malformed JSON: something else");
}

}  // namespace
}  // namespace loom
