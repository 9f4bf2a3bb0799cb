#include "model_options.h"

namespace loom::cli {

void add_model_options(CLI::App* cmd, ModelArgs* args, bool dtype, bool graph) {
  CLI::Option* model = cmd->add_option("--model", args->model, "Model preset (see `loom models`)");
  if (graph)
    cmd->add_option("--graph", args->graph, "A graph JSON file (written by the Python tracer or `loom graph --json`)")
        ->check(CLI::ExistingFile);
  else
    model->required();
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

Expected<void> check_model_source(const ModelArgs& args) {
  if (args.model.empty() == args.graph.empty())
    return fail("give exactly one of --model NAME or --graph FILE", "`loom models` lists the presets");
  if (!args.graph.empty() && (args.batch != 0 || args.seq != 0 || args.layers != 0))
    return fail("--global-batch, --seq and --layers resize a preset; a graph file keeps the sizes it was traced at",
                "trace the model again with other example inputs");
  return {};
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
