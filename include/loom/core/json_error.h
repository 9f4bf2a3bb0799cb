// nlohmann::json's exception text in Loom's error format, so every JSON reader says where the file is broken
// the same way: "FILE: line 3 column 7: malformed JSON: syntax error while parsing value - unexpected '}'".
#pragma once

#include <string>
#include <string_view>

namespace loom {

// "[json.exception.parse_error.101] parse error at line 3, column 7: syntax error ..." becomes
// "line 3 column 7: malformed JSON: syntax error ..."; a text without a position keeps its words after the
// "[json.exception...] " tag, after "malformed JSON: ".
std::string describe_json_error(std::string_view what);

}  // namespace loom
