// check_no_stray_yaml_comma (core/yaml_comma_guard.h): the commas yaml-cpp 0.7 loops on are refused with their
// line and column; commas in plain scalars, quotes, comments and flow collections pass.
#include "loom/core/yaml_comma_guard.h"

#include <gtest/gtest.h>

#include <string>

namespace loom {
namespace {

std::string error_of(std::string_view text) {
  const Expected<void> checked = check_no_stray_yaml_comma(text);
  return checked ? std::string("(passes)") : checked.error().message;
}

// Each of these hung `loom plan --cluster`, `--model-file` or `--constraints` (found by fuzz/cluster_fuzz.cc).
TEST(CheckNoStrayYamlComma, RefusesACommaOpeningATokenOutsideFlowCollections) {
  EXPECT_EQ(error_of(","), "line 1, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("\n\n, 6}}\n"), "line 3, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("# a comment\n  , x"), "line 2, column 3: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("{\"nodes\": 1},"), "line 1, column 13: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("[a]\n,"), "line 2, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("'a'\n, b"), "line 2, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("\"a\\\"\" ,"), "line 1, column 7: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("!!map ,"), "line 1, column 7: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("!t &a ,"), "line 1, column 7: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("a: 1\n---\n, x"), "line 3, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("--- , x"), "line 1, column 5: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("- ,"), "line 1, column 3: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("a:\n  b: ,"), "line 2, column 6: a ',' outside [ ] or { }");
  // Quotes and brackets inside a plain scalar are its text, not a quoted scalar or a collection.
  EXPECT_EQ(error_of("fa:{\"l, x ## c\n---\n, x"), "line 3, column 1: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("{ti-node\", \"nodes\": 1}, x"), "line 1, column 23: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of("&a, x"), "line 1, column 3: a ',' outside [ ] or { }");
  EXPECT_EQ(error_of(std::string_view("\0,\"}+", 5)), "line 1, column 1: the control byte 0x00");  // a NUL hid the comma
  const Expected<void> checked = check_no_stray_yaml_comma(",");
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().hint, "drop the stray comma, or quote the text that holds it");
}

TEST(CheckNoStrayYamlComma, PassesCommasInsideScalarsCommentsAndFlowCollections) {
  for (const char* text : {"", "name: a, b", "name: a , b", "tp: [2, 4]\ndp: {a: 1, b: 2}", "{\"a\": [1, 2],\n \"b\": 3}",
                           "[1\n, 2]", "{a: 1\n, b: 2}", "name: 'a, b'", "name: \"a, b\"", "name: 'it''s, ok'",
                           "# a, comment\nx: 1 # another, one", "url: a:b, c", "- a, b\n- c", "name: a#b, c",
                           "\"multi\n, line\"", "k: [\n  1,\n  2\n]\n", "name: a \"b\", c", "name: x[1], y{2}",
                           "{a \"b\": 1, c: [x, y]}", "{a: b\n  c, d: e}"})
    EXPECT_EQ(error_of(text), "(passes)") << text;
}

}  // namespace
}  // namespace loom
