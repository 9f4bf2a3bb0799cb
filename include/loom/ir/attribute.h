// Operator attributes: a small closed set of value kinds, kept in a sorted map so that
// text and JSON forms are deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "loom/core/error.h"

namespace loom::ir {

using AttrValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>>;
using Attrs = std::map<std::string, AttrValue, std::less<>>;

enum class AttrKind : std::uint8_t { integer, real, boolean, string, int_list };

AttrKind kind_of(const AttrValue& value);
std::string_view name(AttrKind kind);
std::string to_string(const AttrValue& value);  // 3, 0.5, true, "causal", [1, 2]

// Typed access; the error names the attribute and the kind found.
Expected<std::int64_t> get_int(const Attrs& attrs, std::string_view key);
Expected<double> get_real(const Attrs& attrs, std::string_view key);  // accepts integers too
Expected<bool> get_bool(const Attrs& attrs, std::string_view key);
Expected<std::string> get_string(const Attrs& attrs, std::string_view key);
Expected<std::vector<std::int64_t>> get_int_list(const Attrs& attrs, std::string_view key);

// Lookups with a default when the attribute is absent (a present attribute of the wrong kind is still an error).
Expected<std::int64_t> get_int_or(const Attrs& attrs, std::string_view key, std::int64_t fallback);
Expected<double> get_real_or(const Attrs& attrs, std::string_view key, double fallback);
Expected<bool> get_bool_or(const Attrs& attrs, std::string_view key, bool fallback);
Expected<std::string> get_string_or(const Attrs& attrs, std::string_view key, std::string fallback);

}  // namespace loom::ir
