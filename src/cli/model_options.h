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
  std::string graph;  // a graph JSON file (`loom.trace`) instead of --model, where the command takes one
  std::int64_t batch = 0, seq = 0, layers = 0;
  std::string dtype = "bf16";
  std::int64_t vocab_multiple = 128;
};

// Registers --model (required), --global-batch (alias --batch), --seq, --layers, --vocab-multiple and, with
// `dtype`, --dtype. With `graph`, also --graph FILE, and --model is required only without it.
void add_model_options(CLI::App* command, ModelArgs* args, bool dtype = true, bool graph = false);

// With a graph file: exactly one of --model and --graph, and none of the size options (a graph file keeps
// the sizes it was traced at).
Expected<void> check_model_source(const ModelArgs& args);

// The overrides as ModelOptions (dtype parsed; errors name the option).
Expected<models::ModelOptions> model_options(const ModelArgs& args);

}  // namespace loom::cli
