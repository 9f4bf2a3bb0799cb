#include "model_options.h"

namespace loom::cli {

void add_model_options(CLI::App* cmd, ModelArgs* args, bool dtype) {
  cmd->add_option("--model", args->model, "Model preset (see `loom models`)")->required();
  cmd->add_option("--global-batch,--batch", args->batch, "Samples per step (default: the preset's)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--seq", args->seq, "Sequence length or image side")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--layers", args->layers, "Override the depth")->check(CLI::Range(1, 4096));
  cmd->add_option("--vocab-multiple", args->vocab_multiple,
                  "Pad the vocabulary to a multiple of this, as Megatron-LM does (1: no padding)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  if (dtype) cmd->add_option("--dtype", args->dtype, "Weights and activations: bf16, f16 or f32")->capture_default_str();
}

Expected<models::ModelOptions> model_options(const ModelArgs& args) {
  models::ModelOptions options;
  options.batch = args.batch;
  options.seq = args.seq;
  options.layers = args.layers;
  options.vocab_multiple = args.vocab_multiple;
  LOOM_ASSIGN_OR_RETURN(options.dtype, with_context(ir::parse_dtype(args.dtype), "option --dtype"));
  return options;
}

}  // namespace loom::cli
