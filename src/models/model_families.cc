// The family registry and the checks every spec passes before its family builds it (families.h).
#include <algorithm>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/suggest.h"
#include "loom/models/families.h"

namespace loom::models {
namespace {

std::string fields_of(const ModelFamily& family, FieldNaming naming) {
  std::vector<std::string> names;
  for (const FamilyField& f : family.fields)
    names.push_back(naming == FieldNaming::flag ? std::string(flag(f.field)) : std::string(key(f.field)));
  return join(names, ", ");
}

// `divisor` divides `dividend` (both given).
Expected<void> check_divides(const ModelSpec& spec, FieldNaming naming, SpecField divisor, SpecField dividend,
                             std::string_view why) {
  const auto a = static_cast<std::int64_t>(value_of(spec, divisor));
  const auto b = static_cast<std::int64_t>(value_of(spec, dividend));
  if (a == 0 || b == 0 || b % a == 0) return {};
  return fail(
      fmt::format("{} {} does not divide {} {}", field_name(divisor, naming), a, field_name(dividend, naming), b),
      std::string(why));
}

}  // namespace

const FamilyField* ModelFamily::find(SpecField field) const {
  const auto it = std::ranges::find(fields, field, &FamilyField::field);
  return it == fields.end() ? nullptr : &*it;
}

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {gpt_family(),   llama_family(),     bert_family(),
                                                    t5_family(),    mbart_family(),     moe_family(),
                                                    swin_family(),  alphafold_family(), resnet_family(),
                                                    vgg_family(),   unet_family()};
  return families;
}

std::vector<std::string> family_names() {
  std::vector<std::string> names;
  for (const ModelFamily& family : model_families()) names.emplace_back(family.name);
  return names;
}

const ModelFamily* find_family(std::string_view name) {
  const auto& families = model_families();
  const auto it = std::ranges::find(families, name, &ModelFamily::name);
  return it == families.end() ? nullptr : &*it;
}

Expected<void> check_spec(const ModelSpec& spec, FieldNaming naming) {
  const ModelFamily* family = find_family(spec.family);
  if (family == nullptr) {
    const std::vector<std::string> names = family_names();
    std::string hint = did_you_mean(spec.family, names);
    return fail(spec.family.empty() ? std::string("no model family given")
                                    : fmt::format("unknown model family '{}'", spec.family),
                fmt::format("{}the families are {} (docs/models.md)", hint.empty() ? "" : hint + "; ", join(names, ", ")));
  }
  if (spec.nominal_params < 0)
    return fail(fmt::format("nominal_params {} is negative", spec.nominal_params),
                "give the count the model is named by, or leave it out");
  for (const SpecField field : spec_fields()) {
    const double value = value_of(spec, field);
    const FamilyField* taken = family->find(field);
    if (value != 0 && taken == nullptr)
      return fail(fmt::format("family {} has no {}", family->name, field_name(field, naming)),
                  fmt::format("drop it; family {} takes {} (docs/models.md)", family->name,
                              fields_of(*family, naming)));
    if (value < 0)
      return fail(fmt::format("{} is negative: {}", field_name(field, naming), value_text(spec, field)),
                  "give a positive value, or leave the field out for the family's default");
    if (taken != nullptr && value == 0 && taken->default_text.empty())
      return fail(fmt::format("family {} needs {} ({})", family->name, field_name(field, naming), taken->meaning),
                  fmt::format("give {}", field_name(field, naming)));
    if (!is_real(field) && value > static_cast<double>(limit_of(field)))
      return fail(fmt::format("{} {} is over Loom's limit of {}", field_name(field, naming), value_text(spec, field),
                              limit_of(field)),
                  "give a smaller value");
  }
  if (family->heads_split_hidden && spec.head_dim == 0)
    LOOM_RETURN_IF_ERROR(check_divides(spec, naming, SpecField::heads, SpecField::hidden,
                                       fmt::format("the heads split the hidden width evenly: give a head count that "
                                                   "divides {}{}",
                                                   spec.hidden,
                                                   family->find(SpecField::head_dim) != nullptr
                                                       ? fmt::format(", or {} for a wider or narrower attention",
                                                                     field_name(SpecField::head_dim, naming))
                                                       : "")));
  if (spec.kv_heads > spec.heads && spec.heads > 0)
    return fail(fmt::format("{} {} is more than {} {}", field_name(SpecField::kv_heads, naming), spec.kv_heads,
                            field_name(SpecField::heads, naming), spec.heads),
                "grouped-query attention shares each key/value head among several query heads: give at most as many");
  LOOM_RETURN_IF_ERROR(check_divides(spec, naming, SpecField::kv_heads, SpecField::heads,
                                     "each key/value head serves the same number of query heads: give a divisor of "
                                     "the head count"));
  if (spec.positions > 0 && spec.seq > spec.positions)
    return fail(fmt::format("{} {} is longer than the {} {} learned positions", field_name(SpecField::seq, naming),
                            spec.seq, field_name(SpecField::positions, naming), spec.positions),
                "give positions >= seq, or leave positions out (it is then seq)");
  return {};
}

Expected<ModelPreset> preset_of(const ModelSpec& spec, FieldNaming naming) {
  LOOM_RETURN_IF_ERROR(check_spec(spec, naming));
  ModelSpec named = spec;
  if (named.name.empty()) named.name = named.family;
  LOOM_ASSIGN_OR_RETURN(ModelPreset preset, find_family(named.family)->make(named, naming));
  preset.spec = spec;
  return preset;
}

}  // namespace loom::models
