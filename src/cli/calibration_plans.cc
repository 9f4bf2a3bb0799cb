#include "calibration_plans.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "loom/core/input_file.h"
#include "loom/core/strings.h"

namespace loom::cli {
namespace {

constexpr std::size_t kMaxPlans = 64;

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::size_t begin = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > begin) out.emplace_back(line.substr(begin, i - begin));
  }
  return out;
}

// Small enough that a step takes tens of milliseconds on one core, large enough that compute shows; two
// layers unless a plan needs more (a 4-stage pipeline: one layer a stage).
std::string gpt(int layers = 2) {
  return fmt::format("--arch gpt --layers {} --hidden 256 --heads 4 --ffn 1024 --vocab 2048 --seq 128 --dtype f32", layers);
}
constexpr std::string_view kLlama =
    "--arch llama --layers 2 --hidden 256 --heads 4 --kv-heads 2 --ffn 704 --vocab 2048 --seq 128 --dtype f32";

}  // namespace

std::vector<CalibrationPlan> default_calibration_plans() {
  const std::vector<std::pair<std::string_view, std::string>> table = {
      {"gpt-1", fmt::format("{} --batch 8 --gpus 1", gpt())},
      {"llama-1", fmt::format("{} --batch 8 --gpus 1", kLlama)},
      {"gpt-1-recompute", fmt::format("{} --batch 8 --gpus 1 --recompute full", gpt())},
      {"gpt-dp2", fmt::format("{} --batch 8 --policy dp --gpus 2", gpt())},
      {"llama-dp2", fmt::format("{} --batch 8 --policy dp --gpus 2", kLlama)},
      {"gpt-tp2", fmt::format("{} --batch 8 --tp 2 --gpus 2", gpt())},
      {"llama-tp2", fmt::format("{} --batch 8 --tp 2 --gpus 2", kLlama)},
      {"gpt-pp2", fmt::format("{} --batch 8 --pp 2 --microbatches 2 --gpus 2", gpt())},
      {"llama-pp2", fmt::format("{} --batch 8 --pp 2 --microbatches 2 --gpus 2", kLlama)},
      {"gpt-zero1", fmt::format("{} --batch 8 --policy zero --zero 1 --gpus 2", gpt())},
      {"gpt-zero2", fmt::format("{} --batch 8 --policy zero --zero 2 --gpus 2", gpt())},
      {"gpt-zero3", fmt::format("{} --batch 8 --policy zero --zero 3 --gpus 2", gpt())},
      {"llama-zero3", fmt::format("{} --batch 8 --policy zero --zero 3 --gpus 2", kLlama)},
      {"gpt-tp2-recompute", fmt::format("{} --batch 8 --tp 2 --gpus 2 --recompute full", gpt())},
      {"gpt-dp3", fmt::format("{} --batch 12 --policy dp --gpus 3", gpt())},
      {"llama-dp3", fmt::format("{} --batch 12 --policy dp --gpus 3", kLlama)},
      {"gpt-dp4", fmt::format("{} --batch 16 --policy dp --gpus 4", gpt())},
      {"llama-dp4", fmt::format("{} --batch 16 --policy dp --gpus 4", kLlama)},
      {"gpt-tp4", fmt::format("{} --batch 8 --tp 4 --gpus 4", gpt())},
      {"llama-dp2-tp2", fmt::format("{} --batch 8 --dp 2 --tp 2 --gpus 4", kLlama)},
      {"gpt-dp2-tp2", fmt::format("{} --batch 8 --dp 2 --tp 2 --gpus 4", gpt())},
      {"gpt-pp2-tp2", fmt::format("{} --batch 8 --pp 2 --tp 2 --microbatches 2 --gpus 4", gpt())},
      {"gpt-pp4", fmt::format("{} --batch 8 --pp 4 --microbatches 4 --gpus 4", gpt(4))},
      {"gpt-zero3-4", fmt::format("{} --batch 16 --policy zero --zero 3 --gpus 4", gpt())},
      {"llama-zero1-4", fmt::format("{} --batch 16 --policy zero --zero 1 --gpus 4", kLlama)},
  };
  std::vector<CalibrationPlan> plans;
  for (const auto& [name, flags] : table) plans.push_back({std::string(name), words(flags)});
  return plans;
}

Expected<std::vector<CalibrationPlan>> read_calibration_plans(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const std::string text,
                        read_input_file(path, "plan file", "one plan a line: a name, then `loom plan` flags"));
  std::vector<CalibrationPlan> plans;
  std::set<std::string> names;
  std::size_t line_number = 0;
  for (std::string_view rest = text; !rest.empty();) {
    const std::size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    ++line_number;
    std::vector<std::string> w = words(line);
    if (w.empty() || w.front().starts_with("#")) continue;
    const std::string where = fmt::format("plan file {} line {}", path, line_number);
    if (w.size() < 2 || w.front().starts_with("--"))
      return fail(fmt::format("{}: '{}' is not a name followed by flags", where, trim(line)),
                  "write `NAME --arch gpt ... --gpus 2`");
    if (!names.insert(w.front()).second)
      return fail(fmt::format("{}: plan name '{}' is used twice", where, w.front()), "give every plan its own name");
    if (plans.size() == kMaxPlans)
      return fail(fmt::format("{}: more than {} plans", where, kMaxPlans), "split the set into several files");
    plans.push_back({w.front(), std::vector<std::string>(w.begin() + 1, w.end())});
  }
  if (plans.empty()) return fail(fmt::format("plan file {} names no plans", path), "one plan a line: a name, then flags");
  return plans;
}

Expected<api::JobOptions> calibration_options(const CalibrationPlan& plan) {
  api::JobOptions options;
  const std::string where = fmt::format("plan '{}'", plan.name);
  std::set<std::string_view> given;
  for (std::size_t i = 0; i < plan.flags.size(); ++i) {
    const std::string& flag = plan.flags[i];
    const api::OptionField* field = flag.starts_with("--") ? api::find_option(flag) : nullptr;
    // As `loom plan` refuses it: a plan file's line copied to the command line means the same.
    if (field != nullptr && !given.insert(field->keyword).second)
      return fail(fmt::format("{}: {} is given twice", where, flag), "give each flag once");
    if (field != nullptr && (field->keyword == "cluster" || field->keyword == "profile" || field->keyword == "fold"))
      return fail(fmt::format("{}: {} is set by loom calibrate", where, flag),
                  "leave it out; pass --cluster and --profile to loom calibrate itself");
    if (field != nullptr && field->kind == api::ValueKind::flag) {
      LOOM_RETURN_IF_ERROR(with_context(api::set_option(options, flag, "true"), where));
      continue;
    }
    if (!flag.starts_with("--") || i + 1 == plan.flags.size())
      return fail(fmt::format("{}: '{}' is not a flag with a value", where, flag), "write `--flag value` pairs");
    LOOM_RETURN_IF_ERROR(with_context(api::set_option(options, flag, plan.flags[i + 1]), where));
    ++i;
  }
  return options;
}

}  // namespace loom::cli
