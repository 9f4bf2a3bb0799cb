// `loom graph`: build a preset's training graph (forward, backward, optimizer) or read one from
// JSON, print its ops, parameters, FLOPs and memory, and optionally write its JSON or text form.
#include <fmt/format.h>

#include "commands.h"
#include "job_flags.h"
#include "loom/api/resolve_request.h"
#include "loom/core/strings.h"
#include "loom/frontend/graph_file.h"
#include "loom/frontend/onnx_file.h"
#include "loom/ir/autograd.h"
#include "loom/ir/graph_stats.h"
#include "loom/ir/graph_text.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::cli {
namespace {

struct GraphArgs {
  JobFlags job;  // --model-file, --arch and its sizes, --vocab, --shrink: as `loom plan` takes them
  std::string model;
  std::string from;
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::int64_t layers = 0;
  std::string dtype = "bf16";
  std::string attention = "fused";
  std::string optimizer = "adamw";
  bool forward_only = false;
  bool text = false;
  std::string json_out;
};

// The model options the flags give, through the job options `loom plan` resolves the same way.
Expected<api::JobOptions> model_options(const GraphArgs& args) {
  LOOM_ASSIGN_OR_RETURN(api::JobOptions options, job_options(args.job));
  options.model = args.model;
  options.global_batch = args.batch;
  options.seq = args.seq;
  options.layers = args.layers;
  LOOM_ASSIGN_OR_RETURN(options.dtype, with_context(ir::parse_dtype(args.dtype), "option --dtype"));
  LOOM_ASSIGN_OR_RETURN(options.attention,
                        with_context(models::parse_attention_impl(args.attention), "option --attention"));
  LOOM_RETURN_IF_ERROR(api::check_options(options));
  return options;
}

// `catalog`: the built-ins, plus the custom ops (loom.register_op) a --from file defines.
Expected<ir::Graph> load_or_build(const GraphArgs& args, ops::CustomCatalog& catalog) {
  // --batch resizes a traced graph by its "sizes" section (frontend/graph_sizes.h).
  if (!args.from.empty() && !frontend::is_onnx_path(args.from))
    return frontend::load_graph_file(args.from, catalog, args.batch);
  ir::Graph forward;
  if (frontend::is_onnx_path(args.from)) {  // an ONNX model is the forward graph: autograd as for a preset
    LOOM_ASSIGN_OR_RETURN(const api::JobOptions options, job_options(args.job));
    LOOM_ASSIGN_OR_RETURN(const frontend::OnnxOptions onnx,
                          with_context(frontend::parse_onnx_dims(options.onnx_dims), "option --onnx-dim"));
    LOOM_ASSIGN_OR_RETURN(forward, frontend::load_onnx_file(args.from, catalog, onnx));
  } else {
    LOOM_ASSIGN_OR_RETURN(const api::JobOptions options, model_options(args));
    LOOM_ASSIGN_OR_RETURN(forward, api::build_model_of(options));
  }
  if (args.forward_only) return forward;
  ir::OptimizerOptions optimizer;
  LOOM_ASSIGN_OR_RETURN(optimizer.kind, with_context(ir::parse_optimizer(args.optimizer), "option --optimizer"));
  return ir::build_training_graph(forward, catalog, optimizer);
}

void print_summary(const ir::Graph& graph, const ir::GraphStats& s) {
  const auto pass_line = [&](ir::Pass pass) {
    const auto i = static_cast<std::size_t>(pass);
    fmt::print("  {:<10} {:>7} ops  {:>12} FLOPs\n", ir::name(pass), s.ops[i], human_count(s.flops[i]));
  };
  fmt::print("graph {}\n", graph.name);
  pass_line(ir::Pass::forward);
  pass_line(ir::Pass::backward);
  pass_line(ir::Pass::optimizer);
  fmt::print("  {:<10} {:>7} ops  {:>12} FLOPs per step ({:.4e})\n", "total", s.total_ops(), human_count(s.total_flops()),
             s.total_flops());
  fmt::print("parameters   {} ({:L})\n", human_count(static_cast<double>(s.parameter_count)), s.parameter_count);
  fmt::print("memory\n");
  fmt::print("  {:<22} {:>12}\n", "parameters", human_bytes(static_cast<double>(s.parameter_bytes)));
  fmt::print("  {:<22} {:>12}\n", "gradients", human_bytes(static_cast<double>(s.gradient_bytes)));
  fmt::print("  {:<22} {:>12}\n", "optimizer states", human_bytes(static_cast<double>(s.optimizer_state_bytes)));
  fmt::print("  {:<22} {:>12}\n", "inputs", human_bytes(static_cast<double>(s.input_bytes)));
  fmt::print("  {:<22} {:>12}\n", "activations (all)", human_bytes(static_cast<double>(s.activation_bytes)));
  fmt::print("  {:<22} {:>12}\n", "activations (saved)", human_bytes(static_cast<double>(s.saved_activation_bytes)));
}

int run_graph(const GraphArgs& args) {
  const bool model_given = !args.model.empty() || given(args.job, "model_file") || given(args.job, "arch");
  if (model_given == !args.from.empty())
    return report(Error{"give exactly one of --model NAME, --model-file FILE, --arch FAMILY or --from FILE",
                        "`loom models` lists the presets; docs/models.md describes model files and --arch"});
  if (!args.from.empty() && args.attention != "fused")
    return report(Error{"option --attention builds a preset's attention; a graph file keeps the ops it was traced with",
                        "drop --attention, or give --model"});
  ops::CustomCatalog catalog(ops::builtin_ops());
  Expected<ir::Graph> graph = load_or_build(args, catalog);
  if (!graph) return report(graph.error());
  if (!args.json_out.empty() && catalog.has_custom_ops())
    return report(Error{fmt::format("{} defines custom ops (loom.register_op), whose definitions --json would not "
                                    "carry over",
                                    args.from),
                        "save the graph from Python (loom.save_graph), or plan the file itself with `loom plan --graph`"});
  Expected<ir::GraphStats> stats = ir::compute_stats(*graph, catalog);
  if (!stats) return report(stats.error());
  if (args.text) fmt::print("{}", ir::graph_to_text(*graph));
  print_summary(*graph, *stats);
  if (!args.json_out.empty()) {
    if (auto saved = frontend::save_graph_file(*graph, args.json_out); !saved) return report(saved.error());
    fmt::print("wrote {}\n", args.json_out);
  }
  return 0;
}

}  // namespace

void add_graph_command(CLI::App& app) {
  auto args = std::make_shared<GraphArgs>();
  CLI::App* cmd = app.add_subcommand("graph", "Build a training graph and print its ops, FLOPs and memory");
  cmd->add_option("--model", args->model, "Model preset (see `loom models`)");
  cmd->add_option("--from", args->from, "Read the graph from a JSON file written by --json, or an ONNX model (.onnx, docs/onnx.md)");
  // The other model sources and sizes `loom plan` takes; this command's own flags below keep their ranges.
  add_job_flags(cmd, &args->job, {api::OptionGroup::model, api::OptionGroup::sizes},
                {"model", "graph_file", "global_batch", "seq", "layers", "dtype", "attention"});
  const auto positive_up_to = [](std::int64_t max) { return CLI::Range(std::int64_t{1}, max); };
  cmd->add_option("--batch", args->batch, "Global batch (samples per step); default: the preset's, or the batch a --from graph was traced at")
      ->check(positive_up_to(models::kMaxBatchOrSeq));
  cmd->add_option("--seq", args->seq, "Sequence length, or image side for vision models; default: the preset's")
      ->check(positive_up_to(models::kMaxBatchOrSeq));
  cmd->add_option("--layers", args->layers, "Override the number of layers")->check(positive_up_to(models::kMaxLayers));
  cmd->add_option("--dtype", args->dtype, "Weights and activations: bf16, f16 or f32")->capture_default_str();
  cmd->add_option("--attention", args->attention,
                  "fused (one flash-style kernel), eager (scores, softmax and dropout as separate ops) or "
                  "eager-fp32 (eager with the softmax in fp32, as Megatron-LM v3 above 4096 keys)")
      ->capture_default_str();
  cmd->add_option("--optimizer", args->optimizer, "sgd, adam or adamw")->capture_default_str();
  cmd->add_flag("--forward-only", args->forward_only, "Build only the forward pass");
  cmd->add_flag("--text", args->text, "Print every tensor and op in the text form");
  cmd->add_option("--json", args->json_out, "Write the graph's JSON form to this file");
  on_selected(cmd, [args] { return run_graph(*args); });
}

}  // namespace loom::cli
