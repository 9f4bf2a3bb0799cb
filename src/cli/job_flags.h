// The job options of `loom plan`, `compare`, `verify` and `profile` as command-line flags: registered
// from the engine's one keyword table (api/job_options.h), so the flags, their help, their parsing and
// their defaults are those the Python bindings take.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "loom/api/job_options.h"
#include "loom/core/error.h"

namespace loom::cli {

struct JobFlags {
  api::JobOptions defaults;  // the command's defaults (shown in --help), edited by the flags given
  // Filled by add_job_flags: each registered field, where CLI11 stores its text, and its option.
  struct Registered {
    const api::OptionField* field = nullptr;
    std::string text;
    bool on = false;  // flags
    CLI::Option* option = nullptr;
  };
  std::vector<Registered> registered;
};

// Registers the fields of `groups` on `command`, except those named in `except` (by keyword).
void add_job_flags(CLI::App* command, JobFlags* flags, std::initializer_list<api::OptionGroup> groups,
                   std::initializer_list<std::string_view> except = {});

// The defaults with every flag given applied, in the table's order. Errors name the flag.
Expected<api::JobOptions> job_options(const JobFlags& flags);

// Whether the flag of field `keyword` was given.
bool given(const JobFlags& flags, std::string_view keyword);

}  // namespace loom::cli
