// The model options `loom plan`, `loom compare`, `loom profile` and `loom verify` share: the preset and
// what may override its size, turned into models::ModelOptions.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "loom/core/error.h"
#include "loom/models/zoo.h"

namespace loom::cli {

struct ModelArgs {
  std::string model;
  std::int64_t batch = 0, seq = 0, layers = 0;
  std::string dtype = "bf16";
  std::int64_t vocab_multiple = 128;
};

// Registers --model (required), --global-batch (alias --batch), --seq, --layers, --vocab-multiple and, with
// `dtype`, --dtype.
void add_model_options(CLI::App* command, ModelArgs* args, bool dtype = true);

// The overrides as ModelOptions (dtype parsed; errors name the option).
Expected<models::ModelOptions> model_options(const ModelArgs& args);

}  // namespace loom::cli
