#include "loom/models/model_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/models/zoo.h"

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

// No model Loom plans has a width, vocabulary or count this large; past it a graph's shapes overflow.
constexpr std::int64_t kMaxSize = std::int64_t{1} << 24;

// A number written as the whole text (an optional leading '+'): its finite value, or out_of_range where
// it is a number a double cannot hold ('1e400'). Nothing for any other text (words, 'inf', 'nan').
struct Number {
  double value = 0;
  bool out_of_range = false;
};
std::optional<Number> parse_number(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size()) return {};
  if (ec == std::errc::result_out_of_range) return Number{.value = 0, .out_of_range = true};
  if (ec != std::errc{} || !std::isfinite(value)) return {};
  return Number{.value = value, .out_of_range = false};
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

std::int64_t limit_of(SpecField field) { return field == SpecField::layers ? kMaxLayers : kMaxSize; }

Expected<void> set_field(ModelSpec& spec, SpecField field, std::string_view text) {
  const std::optional<Number> number = parse_number(text);
  if (is_real(field)) {
    if (number && number->out_of_range)
      return fail(fmt::format("is out of range: '{}' is beyond a double", text),
                  "give a positive number such as 10000 or 1e-5, at most about 1.8e308");
    if (!number || number->value <= 0)
      return fail(fmt::format("is not a positive number: '{}'", text), "give a positive number such as 10000 or 1e-5");
    spec.*std::get<double ModelSpec::*>(info(field).member) = number->value;
    return {};
  }
  // Integral text such as 1.3e9 is a whole number too; the limit (below 2^53) keeps the conversion exact.
  const std::int64_t limit = limit_of(field);
  if (number && (number->out_of_range || number->value > static_cast<double>(limit)))
    return fail(fmt::format("is out of range: '{}' is not in [1, {}]", text, limit),
                fmt::format("give a whole number from 1 to {} (Loom's limit)", limit));
  if (!number || number->value != std::floor(number->value))
    return fail(fmt::format("is not a whole number: '{}'", text), "give a positive whole number");
  if (number->value <= 0)
    return fail(fmt::format("is not positive: {}", text),
                "give a positive whole number, or leave the field out for the family's default");
  spec.*std::get<std::int64_t ModelSpec::*>(info(field).member) = static_cast<std::int64_t>(number->value);
  return {};
}

std::string value_text(const ModelSpec& spec, SpecField field) {
  // fmt's "{}" writes the shortest text that reads back to the same double.
  return std::visit([&](auto member) { return fmt::format("{}", spec.*member); }, info(field).member);
}

}  // namespace loom::models
