#include "loom/ir/attribute.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace loom::ir {

AttrKind kind_of(const AttrValue& value) { return static_cast<AttrKind>(value.index()); }

std::string_view name(AttrKind kind) {
  switch (kind) {
    case AttrKind::integer: return "integer";
    case AttrKind::real: return "real";
    case AttrKind::boolean: return "boolean";
    case AttrKind::string: return "string";
    case AttrKind::int_list: return "integer list";
  }
  return "?";
}

std::string to_string(const AttrValue& value) {
  struct Printer {
    std::string operator()(std::int64_t v) const { return fmt::format("{}", v); }
    std::string operator()(double v) const { return fmt::format("{}", v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return fmt::format("\"{}\"", v); }
    std::string operator()(const std::vector<std::int64_t>& v) const { return fmt::format("[{}]", fmt::join(v, ", ")); }
  };
  return std::visit(Printer{}, value);
}

namespace {

template <class T>
Expected<T> get_as(const Attrs& attrs, std::string_view key, AttrKind kind) {
  auto it = attrs.find(key);
  if (it == attrs.end()) return fail(fmt::format("missing attribute '{}'", key));
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  return fail(fmt::format("attribute '{}' must be {} but is {} ({})", key, name(kind),
                          name(kind_of(it->second)), to_string(it->second)));
}

}  // namespace

Expected<std::int64_t> get_int(const Attrs& attrs, std::string_view key) {
  return get_as<std::int64_t>(attrs, key, AttrKind::integer);
}
Expected<double> get_real(const Attrs& attrs, std::string_view key) {
  auto it = attrs.find(key);
  if (it != attrs.end())
    if (const auto* integer = std::get_if<std::int64_t>(&it->second)) return static_cast<double>(*integer);
  return get_as<double>(attrs, key, AttrKind::real);
}
Expected<bool> get_bool(const Attrs& attrs, std::string_view key) {
  return get_as<bool>(attrs, key, AttrKind::boolean);
}
Expected<std::string> get_string(const Attrs& attrs, std::string_view key) {
  return get_as<std::string>(attrs, key, AttrKind::string);
}
Expected<std::vector<std::int64_t>> get_int_list(const Attrs& attrs, std::string_view key) {
  return get_as<std::vector<std::int64_t>>(attrs, key, AttrKind::int_list);
}

Expected<std::int64_t> get_int_or(const Attrs& attrs, std::string_view key, std::int64_t fallback) {
  return attrs.contains(key) ? get_int(attrs, key) : Expected<std::int64_t>(fallback);
}
Expected<double> get_real_or(const Attrs& attrs, std::string_view key, double fallback) {
  return attrs.contains(key) ? get_real(attrs, key) : Expected<double>(fallback);
}
Expected<bool> get_bool_or(const Attrs& attrs, std::string_view key, bool fallback) {
  return attrs.contains(key) ? get_bool(attrs, key) : Expected<bool>(fallback);
}
Expected<std::string> get_string_or(const Attrs& attrs, std::string_view key, std::string fallback) {
  return attrs.contains(key) ? get_string(attrs, key) : Expected<std::string>(std::move(fallback));
}

}  // namespace loom::ir
