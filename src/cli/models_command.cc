// `loom models`: the presets of the model zoo with their parameter counts (built, not quoted); `--json`
// prints the same as JSON (docs/json.md); `--write-files DIR` writes each as a model file (docs/models.md).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "loom/core/output_set.h"
#include "loom/core/strings.h"
#include "loom/core/suggest.h"
#include "loom/frontend/model_file.h"
#include "loom/models/zoo.h"

namespace loom::cli {
namespace {

struct ModelsArgs {
  std::string family;
  bool json = false;
  std::string write_files;  // a directory: every listed preset as <name>.yaml
};

struct PresetRow {
  const models::ModelPreset* preset;
  std::int64_t parameters;  // counted in the built forward graph
};

// Every row is built before anything is printed, so an error leaves no half-written table or JSON.
Expected<std::vector<PresetRow>> preset_rows(const std::string& family) {
  std::vector<PresetRow> rows;
  for (const models::ModelPreset& preset : models::model_presets()) {
    if (!family.empty() && preset.family != family) continue;
    // Counting parameters builds the forward graph; batch 1 keeps that cheap.
    models::ModelOptions options;
    options.batch = 1;
    LOOM_ASSIGN_OR_RETURN(ir::Graph graph, models::build_model(preset.name, options));
    std::int64_t params = 0;
    for (ir::TensorId p : graph.parameters) params += graph.tensor(p).shape.numel();
    rows.push_back({&preset, params});
  }
  if (rows.empty()) {
    std::vector<std::string> families;
    for (const models::ModelPreset& preset : models::model_presets())
      if (std::find(families.begin(), families.end(), preset.family) == families.end())
        families.push_back(preset.family);
    std::string hint = did_you_mean(family, families);
    if (hint.empty()) hint = fmt::format("the families are {}", join(families, ", "));
    return fail(fmt::format("no preset of family '{}'", family), hint);
  }
  return rows;
}

void print_table(const std::vector<PresetRow>& rows) {
  constexpr std::string_view kRowFormat = "{:<18} {:<10} {:>14} {:>10} {:>7} {:>6}  {}\n";
  fmt::print(fmt::runtime(kRowFormat), "preset", "family", "parameters", "nominal", "batch", "seq", "description");
  for (const auto& [preset, params] : rows)
    fmt::print(fmt::runtime(kRowFormat), preset->name, preset->family, fmt::format("{:L}", params),
               human_count(preset->nominal_params), preset->default_batch, preset->default_seq, preset->description);
}

nlohmann::ordered_json models_json(const std::vector<PresetRow>& rows) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& [preset, params] : rows)
    list.push_back({{"name", preset->name},
                    {"family", preset->family},
                    {"description", preset->description},
                    {"parameters", params},
                    {"nominal_parameters", std::llround(preset->nominal_params)},
                    {"default_batch", preset->default_batch},
                    {"default_seq", preset->default_seq}});
  return {{"schema", "loom.models/1"}, {"models", list}};
}

// Each preset's model file (docs/models.md), written atomically; every row is listed before any is written.
Expected<void> write_model_files(const std::vector<PresetRow>& rows, const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec))
    return fail(fmt::format("--write-files: '{}' is not a directory", directory), "create it first");
  OutputSet set;
  for (const auto& [preset, params] : rows)
    set.add(directory, preset->name + ".yaml", frontend::model_to_yaml(preset->spec), "the model file");
  LOOM_RETURN_IF_ERROR(set.commit());
  fmt::print("wrote {} model files to {}\n", rows.size(), directory);
  return {};
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto args = std::make_shared<ModelsArgs>();
  CLI::App* cmd = app.add_subcommand("models", "List the model presets with their parameter counts");
  cmd->add_option("--family", args->family, "Only this family (gpt, llama, t5, swin, ...)");
  cmd->add_flag("--json", args->json, "Print the presets as JSON (docs/json.md)");
  cmd->add_option("--write-files", args->write_files,
                  "Write each preset as a model file DIR/<name>.yaml (docs/models.md), for --model-file");
  on_selected(cmd, [args] {
    Expected<std::vector<PresetRow>> rows = preset_rows(args->family);
    if (!rows) return report(rows.error());
    if (!args->write_files.empty()) {
      if (auto written = write_model_files(*rows, args->write_files); !written) return report(written.error());
      return 0;
    }
    if (args->json)
      fmt::print("{}\n", models_json(*rows).dump(2));
    else
      print_table(*rows);
    return 0;
  });
}

}  // namespace loom::cli
