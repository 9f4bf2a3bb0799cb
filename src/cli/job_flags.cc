#include "job_flags.h"

#include <algorithm>

#include "loom/core/strings.h"

namespace loom::cli {
namespace {

// CLI11's name list: the flag and its command-line aliases ("--global-batch,--batch").
std::string names_of(const api::OptionField& f) {
  std::vector<std::string> names{std::string(f.flag)};
  for (std::string_view alias : f.aliases)
    if (alias.starts_with("--")) names.emplace_back(alias);
  return join(names, ",");
}

// A default worth showing: not the "0: derived" or empty ones, whose meaning the help text states.
bool shows_default(const api::OptionField& f, const std::string& value) {
  if (value.empty()) return false;
  return !(f.kind == api::ValueKind::whole && value == "0") && f.kind != api::ValueKind::flag;
}

}  // namespace

void add_job_flags(CLI::App* command, JobFlags* flags, std::initializer_list<api::OptionGroup> groups,
                   std::initializer_list<std::string_view> except) {
  for (const api::OptionField& f : api::option_fields()) {
    if (std::find(groups.begin(), groups.end(), f.group) == groups.end()) continue;
    if (std::find(except.begin(), except.end(), f.keyword) != except.end()) continue;
    flags->registered.push_back({&f, {}, false, nullptr});
  }
  // Registered after the vector stops growing: CLI11 keeps pointers to the texts.
  for (JobFlags::Registered& r : flags->registered) {
    const api::OptionField& f = *r.field;
    if (f.kind == api::ValueKind::flag) {
      r.option = command->add_flag(names_of(f), r.on, std::string(f.help));
      continue;
    }
    r.option = command->add_option(names_of(f), r.text, std::string(f.help));
    if (const std::string value = f.get(flags->defaults); shows_default(f, value)) r.option->default_str(value);
  }
}

Expected<api::JobOptions> job_options(const JobFlags& flags) {
  api::JobOptions options = flags.defaults;
  for (const JobFlags::Registered& r : flags.registered) {
    if (r.option->count() == 0) continue;
    const std::string text = r.field->kind == api::ValueKind::flag ? "true" : r.text;
    LOOM_RETURN_IF_ERROR(api::set_option(options, r.field->flag, text));
  }
  return options;
}

bool given(const JobFlags& flags, std::string_view keyword) {
  return std::ranges::any_of(flags.registered,
                             [&](const JobFlags::Registered& r) { return r.field->keyword == keyword && r.option->count() > 0; });
}

}  // namespace loom::cli
