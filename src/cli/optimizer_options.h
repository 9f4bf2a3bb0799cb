// The optimizer options of `loom plan` and `loom compare`: the update rule and its hyperparameters, which
// generated programs run (a plan trained beside torch.optim must use the same ones).
#pragma once

#include <CLI/CLI.hpp>

#include "loom/core/error.h"
#include "loom/ir/autograd.h"

namespace loom::cli {

struct OptimizerArgs {
  std::string kind = "adamw";
  ir::OptimizerOptions defaults;  // the hyperparameters, edited in place by the options
};

// Registers --optimizer, --lr, --beta1, --beta2, --eps, --weight-decay and --momentum.
void add_optimizer_options(CLI::App* command, OptimizerArgs* args);

// The options as ir::OptimizerOptions (an unknown --optimizer is an error naming the option).
Expected<ir::OptimizerOptions> optimizer_options(const OptimizerArgs& args);

}  // namespace loom::cli
