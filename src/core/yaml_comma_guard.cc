// Scans YAML text for a comma that opens a token at flow depth 0 (yaml_comma_guard.h). A token opens at the
// start of a line's content, after a block indicator ("- ", "? ", ": "), a property (&anchor, !tag), a document
// marker, a flow indicator, or a closed quoted scalar or flow collection. A plain scalar runs to ": ", " #" or
// (in a flow collection) a flow indicator, and everything inside it is text: commas, quotes, brackets.
#include "loom/core/yaml_comma_guard.h"

#include <fmt/format.h>

namespace loom {
namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool ends_token(std::string_view text, std::size_t i) { return i >= text.size() || blank(text[i]) || text[i] == '\n'; }

bool flow_indicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

}  // namespace

Expected<void> check_no_stray_yaml_comma(std::string_view text) {
  int depth = 0;       // [ ] and { } nesting
  bool plain = false;  // inside a plain scalar; otherwise the next non-blank character opens a token
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      if (depth == 0) plain = false;  // a block-level line opens afresh (a continuation is refused: see the header)
      continue;
    }
    if (blank(c)) continue;
    if (static_cast<unsigned char>(c) < 0x20) {  // YAML allows no other C0 byte; yaml-cpp skips a NUL
      return fail(fmt::format("line {}, column {}: the control byte 0x{:02x}", line, i - line_start + 1,
                              static_cast<unsigned char>(c)),
                  "a YAML file is text: remove the byte");
    }
    if (c == '#' && (i == line_start || blank(text[i - 1]))) {  // a comment, to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (plain) {
      if (c == ':' && (ends_token(text, i + 1) || (depth > 0 && i + 1 < text.size() && flow_indicator(text[i + 1])))) {
        plain = false;  // the scalar was a key; its value opens next
        continue;
      }
      if (depth == 0 || !flow_indicator(c)) continue;  // text of the scalar
      plain = false;  // a flow indicator ends a plain scalar inside [ ] or { }
    }
    if (c == '"' || c == '\'') {  // a quoted scalar, over lines; '' is a quote inside single quotes
      for (++i; i < text.size(); ++i) {
        if (text[i] == '\n') {
          ++line;
          line_start = i + 1;
        } else if (c == '"' && text[i] == '\\') {
          ++i;
        } else if (text[i] == c) {
          if (c == '\'' && i + 1 < text.size() && text[i + 1] == '\'') ++i;
          else break;
        }
      }
      continue;
    }
    if (c == '[' || c == '{') {
      ++depth;
      continue;
    }
    if (c == ']' || c == '}') {
      if (depth > 0) --depth;
      continue;
    }
    if (c == ',') {
      if (depth > 0) continue;
      return fail(fmt::format("line {}, column {}: a ',' outside [ ] or {{ }}", line, i - line_start + 1),
                  "drop the stray comma, or quote the text that holds it");
    }
    if ((c == '-' || c == '?' || c == ':') && ends_token(text, i + 1)) continue;  // a block indicator
    // a property, an alias or a document marker
    if (c == '&' || c == '!' || c == '*' || text.substr(i).starts_with("---") || text.substr(i).starts_with("...")) {
      while (i + 1 < text.size() && !ends_token(text, i + 1) && !flow_indicator(text[i + 1])) ++i;  // one word
      continue;
    }
    plain = true;
  }
  return {};
}

}  // namespace loom
