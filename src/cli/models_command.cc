// `loom models`: the presets of the model zoo with their parameter counts (built, not quoted).
#include <fmt/format.h>

#include "commands.h"
#include "loom/core/strings.h"
#include "loom/ir/graph_stats.h"
#include "loom/models/zoo.h"
#include "loom/ops/registry.h"

namespace loom::cli {

void add_models_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("models", "List the model presets with their parameter counts");
  auto family = std::make_shared<std::string>();
  cmd->add_option("--family", *family, "Only this family (gpt, llama, t5, swin, ...)");
  on_selected(cmd, [family] {
    fmt::print("{:<18} {:<10} {:>14} {:>10} {:>7} {:>6}  {}\n", "preset", "family", "parameters", "nominal", "batch",
               "seq", "description");
    int shown = 0;
    for (const models::ModelPreset& preset : models::model_presets()) {
      if (!family->empty() && preset.family != *family) continue;
      // Counting parameters builds the forward graph; batch 1 keeps that cheap.
      models::ModelOptions options;
      options.batch = 1;
      Expected<ir::Graph> graph = models::build_model(preset.name, options);
      if (!graph) return report(graph.error());
      std::int64_t params = 0;
      for (ir::TensorId p : graph->parameters) params += graph->tensor(p).shape.numel();
      fmt::print("{:<18} {:<10} {:>14} {:>10} {:>7} {:>6}  {}\n", preset.name, preset.family,
                 fmt::format("{:L}", params), human_count(preset.nominal_params), preset.default_batch,
                 preset.default_seq, preset.description);
      ++shown;
    }
    if (shown == 0) return report(Error{fmt::format("no preset of family '{}'", *family), "`loom models` lists all"});
    return 0;
  });
}

}  // namespace loom::cli
