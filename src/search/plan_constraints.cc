// Entry names and op patterns of constraint files (plan_constraints.h).
#include "loom/search/plan_constraints.h"

#include <charconv>

#include "loom/core/strings.h"

namespace loom::search {
namespace {

// '*' any run of characters, '?' one character.
bool glob(std::string_view pattern, std::string_view text) {
  if (pattern.empty()) return text.empty();
  if (pattern[0] == '*')
    for (std::size_t skip = 0; skip <= text.size(); ++skip)
      if (glob(pattern.substr(1), text.substr(skip))) return true;
  if (text.empty()) return false;
  return (pattern[0] == '?' || pattern[0] == text[0]) && glob(pattern.substr(1), text.substr(1));
}

// One dotted component: "N-M" matches the whole numbers from N to M, anything else is a glob.
bool component_matches(std::string_view pattern, std::string_view text) {
  const std::size_t dash = pattern.find('-');
  if (dash == std::string_view::npos || pattern.empty() || !std::isdigit(static_cast<unsigned char>(pattern[0])))
    return glob(pattern, text);
  long first = 0, last = 0, value = 0;
  std::from_chars(pattern.data(), pattern.data() + dash, first);
  std::from_chars(pattern.data() + dash + 1, pattern.data() + pattern.size(), last);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && first <= value && value <= last;
}

}  // namespace

std::string to_string(const EntryName& entry) {
  return entry.line > 0 ? fmt::format("'{}' (line {})", entry.path, entry.line) : fmt::format("'{}'", entry.path);
}

// A name pattern covers the op when its components match the name's first ones (a module covers the
// ops below it); a type pattern is one glob over the type.
bool matches(const OpPattern& pattern, const ir::Op& op) {
  if (pattern.type) return glob(pattern.text, op.type);
  const std::vector<std::string> want = split(pattern.text, '.');
  const std::vector<std::string> have = split(op.name, '.');
  if (want.size() > have.size()) return false;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!component_matches(want[i], have[i])) return false;
  return true;
}

}  // namespace loom::search
