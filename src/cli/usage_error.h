// Command-line parse errors in Loom's format: CLI11's ParseError becomes an Error that names the option
// (or command) and the fix, with a "did you mean" for a mistyped name. Printed by report(), exit kUsageError.
#pragma once

#include <CLI/CLI.hpp>

#include "loom/core/error.h"

namespace loom::cli {

// `app` is the root after app.parse threw `error`; the parsed part of the command line is still in it.
Error usage_error(const CLI::App& app, const CLI::ParseError& error);

}  // namespace loom::cli
