#include "optimizer_options.h"

namespace loom::cli {

void add_optimizer_options(CLI::App* command, OptimizerArgs* args) {
  ir::OptimizerOptions& o = args->defaults;
  command->add_option("--optimizer", args->kind, "Update rule: sgd, adam or adamw")->capture_default_str();
  command->add_option("--lr", o.lr, "Learning rate")->capture_default_str();
  command->add_option("--beta1", o.beta1, "Adam's first-moment decay")->capture_default_str();
  command->add_option("--beta2", o.beta2, "Adam's second-moment decay")->capture_default_str();
  command->add_option("--eps", o.eps, "Adam's denominator epsilon")->capture_default_str();
  command->add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  command->add_option("--momentum", o.momentum, "SGD's momentum (0: none)")->capture_default_str();
}

Expected<ir::OptimizerOptions> optimizer_options(const OptimizerArgs& args) {
  ir::OptimizerOptions o = args.defaults;  // the ranges are checked where the optimizer pass builds its ops
  LOOM_ASSIGN_OR_RETURN(o.kind, with_context(ir::parse_optimizer(args.kind), "option --optimizer"));
  return o;
}

}  // namespace loom::cli
