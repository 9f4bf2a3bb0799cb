#include "loom/models/model_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "loom/core/strings.h"

namespace loom::models {
namespace {

using Member = std::variant<std::int64_t ModelSpec::*, double ModelSpec::*>;

struct FieldInfo {
  SpecField field;
  std::string_view key;
  std::string_view flag;
  Member member;
};

constexpr std::array<FieldInfo, kSpecFieldCount> kFields = {{
    {SpecField::layers, "layers", "--layers", &ModelSpec::layers},
    {SpecField::hidden, "hidden", "--hidden", &ModelSpec::hidden},
    {SpecField::heads, "heads", "--heads", &ModelSpec::heads},
    {SpecField::kv_heads, "kv_heads", "--kv-heads", &ModelSpec::kv_heads},
    {SpecField::head_dim, "head_dim", "--head-dim", &ModelSpec::head_dim},
    {SpecField::ffn, "ffn", "--ffn", &ModelSpec::ffn},
    {SpecField::vocab, "vocab", "--vocab", &ModelSpec::vocab},
    {SpecField::seq, "seq", "--seq", &ModelSpec::seq},
    {SpecField::positions, "positions", "--positions", &ModelSpec::positions},
    {SpecField::batch, "batch", "--global-batch", &ModelSpec::batch},
    {SpecField::experts, "experts", "--experts", &ModelSpec::experts},
    {SpecField::classes, "classes", "--classes", &ModelSpec::classes},
    {SpecField::window, "window", "--window", &ModelSpec::window},
    {SpecField::channels, "channels", "--channels", &ModelSpec::channels},
    {SpecField::width_factor, "width_factor", "--width-factor", &ModelSpec::width_factor},
    {SpecField::rope_base, "rope_base", "--rope-base", &ModelSpec::rope_base},
    {SpecField::norm_eps, "norm_eps", "--norm-eps", &ModelSpec::norm_eps},
}};

const FieldInfo& info(SpecField field) { return kFields[static_cast<std::size_t>(field)]; }

constexpr std::array<SpecField, kSpecFieldCount> kOrder = [] {
  std::array<SpecField, kSpecFieldCount> order{};
  for (std::size_t i = 0; i < kSpecFieldCount; ++i) order[i] = kFields[i].field;
  return order;
}();

// A finite number, the whole text (an optional leading '+'); nothing otherwise.
std::optional<double> parse_real(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return {};
  return value;
}

}  // namespace

std::span<const SpecField> spec_fields() { return kOrder; }
std::string_view key(SpecField field) { return info(field).key; }
std::string_view flag(SpecField field) { return info(field).flag; }
bool is_real(SpecField field) { return std::holds_alternative<double ModelSpec::*>(info(field).member); }

std::string field_name(SpecField field, FieldNaming naming) {
  return naming == FieldNaming::flag ? std::string(flag(field)) : fmt::format("'{}'", key(field));
}

const SpecField* find_spec_field(std::string_view name) {
  const auto it = std::ranges::find(kFields, name, &FieldInfo::key);
  return it == kFields.end() ? nullptr : &it->field;
}

double value_of(const ModelSpec& spec, SpecField field) {
  return std::visit([&](auto member) { return static_cast<double>(spec.*member); }, info(field).member);
}

Expected<void> set_field(ModelSpec& spec, SpecField field, std::string_view text) {
  const std::optional<double> value = parse_real(text);
  if (is_real(field)) {
    if (!value || *value <= 0)
      return fail(fmt::format("is not a positive number: '{}'", text), "give a positive number such as 10000 or 1e-5");
    spec.*std::get<double ModelSpec::*>(info(field).member) = *value;
    return {};
  }
  // Integral text such as 1.3e9 is a whole number too; the bound keeps the conversion exact.
  if (!value || *value != std::floor(*value) || std::fabs(*value) > 9.0e15)
    return fail(fmt::format("is not a whole number: '{}'", text), "give a positive whole number");
  if (*value <= 0)
    return fail(fmt::format("is not positive: {}", text),
                "give a positive whole number, or leave the field out for the family's default");
  spec.*std::get<std::int64_t ModelSpec::*>(info(field).member) = static_cast<std::int64_t>(*value);
  return {};
}

std::string value_text(const ModelSpec& spec, SpecField field) {
  // fmt's "{}" writes the shortest text that reads back to the same double.
  return std::visit([&](auto member) { return fmt::format("{}", spec.*member); }, info(field).member);
}

}  // namespace loom::models
