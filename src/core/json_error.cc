#include "loom/core/json_error.h"

#include <charconv>

#include <fmt/format.h>

namespace loom {
namespace {

// Reads the number at the front of `text` and drops it; -1 when there is none.
long take_number(std::string_view& text) {
  long value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{}) return -1;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return value;
}

bool take(std::string_view& text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return false;
  text.remove_prefix(prefix.size());
  return true;
}

}  // namespace

std::string describe_json_error(std::string_view what) {
  if (what.starts_with("[json.exception"))
    if (const std::size_t tag_end = what.find("] "); tag_end != std::string_view::npos) what.remove_prefix(tag_end + 2);
  std::string_view rest = what;
  if (take(rest, "parse error at line ")) {
    const long line = take_number(rest);
    if (line >= 0 && take(rest, ", column ")) {
      const long column = take_number(rest);
      if (column >= 0 && take(rest, ": ")) return fmt::format("line {} column {}: malformed JSON: {}", line, column, rest);
    }
  }
  return fmt::format("malformed JSON: {}", what);
}

}  // namespace loom
