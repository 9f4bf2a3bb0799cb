// `loom profile` (docs/profiling.md): builds a preset's (or a traced graph's) plan under a policy, collects the profile keys of
// its sub-ops that the database lacks, has the Python timer (python/loom_profile) measure them on this
// machine's device, and merges the measurements into the database. The device name the keys are filed
// under comes from the timer (a CUDA device matched to a known GPU's name, or "cpu") unless given.
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "commands.h"
#include "loom/cluster/presets.h"
#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/cost/compute_model.h"
#include "loom/cost/profile_requests.h"
#include "loom/cost/roofline_check.h"
#include "job_flags.h"
#include "loom/api/job.h"
#include "loom/api/resolve_request.h"
#include "loom/ops/registry.h"
#include "profile_timer.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct ProfileArgs {
  JobFlags job;  // the same fields as `loom plan`'s, so both build the same plan
  std::string db;
  std::string device_name;
  std::string python;
  bool dry_run = false;
  std::string requests_out;
  std::string results_in;
  int warmup = 0, repeats = 0;
  bool compare = false;
};

Expected<std::string> read_text(const std::string& path, std::string_view what) {
  return read_input_file(path, what, "the timer (python/loom_profile) writes it");
}

// The training graph of the preset, planned under the policy (the job's first two stages).
Expected<std::unique_ptr<api::Job>> build_plan(const ProfileArgs& args, api::JobOptions options) {
  options.fold = api::Fold::off;
  api::size_to_degrees(options, given(args.job, "gpus"));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<api::Job> job, api::load_job(options));
  LOOM_RETURN_IF_ERROR(api::apply_policy(*job));
  return job;
}

// The database at `path`, or an empty one when the file does not exist yet.
Expected<cost::ProfileDb> load_or_new(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return cost::ProfileDb{};
  return cost::ProfileDb::load(path);
}

std::vector<cluster::GpuSpec> known_gpus() {
  std::vector<cluster::GpuSpec> gpus;
  for (const std::string& name : cluster::preset_names()) {
    Expected<cluster::Cluster> c = cluster::make_cluster(name);
    if (c && std::none_of(gpus.begin(), gpus.end(), [&](const auto& g) { return g.name == c->gpu.name; }))
      gpus.push_back(c->gpu);
  }
  return gpus;
}

// The known GPU of that name (its peaks price the roofline), else a spec with the name alone.
cluster::GpuSpec gpu_named(const std::string& name) {
  for (const cluster::GpuSpec& gpu : known_gpus())
    if (gpu.name == name) return gpu;
  return cluster::GpuSpec{.name = name};
}

// The probe writes a results file with no results: its device and torch version.
Expected<cost::TimerResults> probe_device(const TimerSetup& timer, const TempDir& dir) {
  const std::string out = (dir.path() / "device.json").string();
  LOOM_RETURN_IF_ERROR(run_timer(timer, {"--probe", "--out", out}));
  LOOM_ASSIGN_OR_RETURN(std::string text, read_text(out, "timer's device report"));
  return cost::parse_timer_results(text, out, "");
}

std::map<std::string, double> timing_of(const ProfileArgs& args) {
  std::map<std::string, double> timing;
  if (args.warmup > 0) timing["warmup"] = args.warmup;
  if (args.repeats > 0) timing["repeats"] = args.repeats;
  return timing;
}

void print_compare(const plan::Plan& plan, const ir::OpCatalog& catalog, const cluster::GpuSpec& gpu,
                   const cost::ProfileDb& db) {
  if (gpu.peak_fp32 <= 0) {
    fmt::print("compare    no roofline for '{}': not a known GPU\n", gpu.name);
    return;
  }
  Expected<cost::ComputeModel> roofline = cost::ComputeModel::make(plan, catalog, gpu);
  if (!roofline) return;
  const std::vector<cost::RooflineComparison> rows = cost::compare_roofline(plan, catalog, *roofline, db);
  fmt::print("roofline vs measured on {} (ratio = roofline / measured):\n", gpu.name);
  fmt::print("  {:<14} {:>5} {:>8} {:>8}  {}\n", "class", "keys", "median", "worst", "worst key");
  for (const cost::ClassAccuracy& c : cost::accuracy_by_class(rows))
    fmt::print("  {:<14} {:>5} {:>8.3f} {:>8.3f}  {}\n", ir::name(c.op_class), c.keys, c.median_ratio, c.worst_ratio,
               c.worst.to_string());
  fmt::print("  {:<14} {:>12} {:>12} {:>8} {:>11} {:>11} {:>7}  {}\n", "class", "flops", "bytes", "peak TF",
             "roofline s", "measured s", "ratio", "key");
  for (const cost::RooflineComparison& r : rows)
    fmt::print("  {:<14} {:>12.4e} {:>12.4e} {:>8.1f} {:>11.4e} {:>11.4e} {:>7.3f}  {}\n", ir::name(r.op_class),
               r.roofline.flops, r.roofline.bytes, r.roofline.peak / 1e12, r.roofline.seconds, r.measured_seconds,
               r.roofline.seconds > 0 ? r.ratio() : 0.0, r.key.to_string());
}

int run_profile(const ProfileArgs& args) {
  Expected<api::JobOptions> given_options = job_options(args.job);
  if (!given_options) return report(given_options.error(), kUsageError);
  Expected<std::unique_ptr<api::Job>> planned = build_plan(args, *given_options);
  if (!planned) return report(planned.error());
  const plan::Plan& plan = (*planned)->plan;
  const policy::ParallelConfig& config = (*planned)->request.config;
  const api::JobOptions& options = (*planned)->options;
  Expected<cost::ProfileDb> db = load_or_new(args.db);
  if (!db) return report(with_context(db.error(), "option --db"));

  // The timer is needed to measure and, without --device-name, to name the device.
  const bool needs_timer = (!args.dry_run && args.results_in.empty()) || (args.device_name.empty() && args.results_in.empty());
  std::optional<TimerSetup> timer;
  std::optional<TempDir> scratch;
  if (needs_timer) {
    Expected<TimerSetup> found = find_timer(args.python);
    if (!found) return report(found.error());
    timer = *found;
    Expected<TempDir> made = TempDir::make();
    if (!made) return report(made.error());
    scratch.emplace(std::move(*made));
  }
  std::optional<cost::TimerResults> given_results;
  if (!args.results_in.empty()) {
    Expected<std::string> text = read_text(args.results_in, "timer results");
    if (!text) return report(with_context(text.error(), "option --results"));
    // Keys get their device below, once it is known (the file may name it).
    Expected<cost::TimerResults> parsed = cost::parse_timer_results(*text, args.results_in, "");
    if (!parsed) return report(parsed.error());
    given_results = std::move(*parsed);
  }
  std::string device = args.device_name;
  std::string device_note = "given";
  if (device.empty() && given_results) {
    device = cost::profile_device_name(given_results->device_name, known_gpus());
    device_note = fmt::format("from {}: {} {}", args.results_in, given_results->device_type, given_results->device_name);
  } else if (device.empty()) {
    Expected<cost::TimerResults> probe = probe_device(*timer, *scratch);
    if (!probe) return report(probe.error());
    device = cost::profile_device_name(probe->device_name, known_gpus());
    device_note = fmt::format("torch {} on {} '{}'", probe->torch_version, probe->device_type, probe->device_name);
  }
  const cluster::GpuSpec gpu = gpu_named(device);

  Expected<cost::ComputeModel> model = cost::ComputeModel::make(plan, (*planned)->catalog, gpu, &*db);
  if (!model) return report(model.error());
  const cost::ProfileRequests wanted = cost::profile_requests(plan, *model);
  const std::size_t keys = wanted.present + wanted.requests.size() + wanted.unresolved.size();

  fmt::print("model      {}{}: {} ops\n", api::model_label(options), options.shrink ? " (shrunk)" : "", (*planned)->graph.ops.size());
  fmt::print("policy     {}: dp {} x tp {} x pp {}, {} micro-batch{}{}\n", options.policy, config.dp, config.tp, config.pp,
             config.micro_batches, config.micro_batches == 1 ? "" : "es",
             config.sequence_parallel ? ", sequence parallel" : "");
  fmt::print("device     {} ({})\n", device, device_note);
  fmt::print("keys       {} distinct in {} sub-ops: {} already present, {} to measure\n", keys, wanted.live_sub_ops,
             wanted.present, wanted.requests.size() + wanted.unresolved.size());
  for (const cost::UnresolvedKey& u : wanted.unresolved)
    fmt::print("  cannot request {}: {}\n", u.key.to_string(), u.reason);

  const std::string request_text = cost::requests_to_json(wanted.requests, device, timing_of(args));
  if (!args.requests_out.empty())
    if (Expected<void> written = write_file_atomically(args.requests_out, request_text, "the profile requests"); !written)
      return report(with_context(written.error(), "option --requests"));
  if (args.dry_run) {
    for (const cost::ProfileRequest& r : wanted.requests)
      fmt::print("  request  {}  ({} sub-op{}{}, e.g. {})\n", r.key.to_string(), r.sub_ops, r.sub_ops == 1 ? "" : "s",
                 r.variants > 1 ? fmt::format(", {} variants", r.variants) : "", r.example);
    if (args.compare) print_compare(plan, (*planned)->catalog, gpu, *db);
    fmt::print("dry run    nothing measured; {} unchanged\n", args.db);
    return 0;
  }

  cost::TimerResults results;
  if (given_results) {
    results = std::move(*given_results);
    for (auto& entry : results.measured) entry.first.device = device;
    for (auto& entry : results.unsupported) entry.first.device = device;
  } else if (!wanted.requests.empty()) {
    const std::string requests_path = (scratch->path() / "requests.json").string();
    const std::string results_path = (scratch->path() / "results.json").string();
    if (Expected<void> written = write_file_atomically(requests_path, request_text, "the profile requests"); !written)
      return report(written.error());
    if (Expected<void> ran = run_timer(*timer, {requests_path, "--out", results_path}); !ran) return report(ran.error());
    Expected<std::string> text = read_text(results_path, "timer results");
    if (!text) return report(text.error());
    Expected<cost::TimerResults> parsed = cost::parse_timer_results(*text, results_path, device);
    if (!parsed) return report(parsed.error());
    results = std::move(*parsed);
    if (args.device_name.empty() && cost::profile_device_name(results.device_name, known_gpus()) != device)
      return report(Error{fmt::format("the timer measured on '{}', but the keys are for '{}'", results.device_name, device),
                          "pass --device-name to file the measurements under a name of your choice"});
  }

  const cost::MergeSummary merged = cost::merge_results(*db, wanted, results);
  if (merged.measured > 0)
    if (Expected<void> saved = db->save(args.db); !saved) return report(with_context(saved.error(), "option --db"));
  const auto plural = [](std::size_t n) { return n == 1 ? "" : "s"; };
  fmt::print("measured   {} key{} into {} ({} entries now)\n", merged.measured, plural(merged.measured), args.db,
             db->size());
  fmt::print("skipped    {} key{}{}\n", merged.skipped.size(), plural(merged.skipped.size()),
             merged.skipped.empty() ? "" : ":");
  for (const auto& [key, reason] : merged.skipped) fmt::print("  {}: {}\n", key.to_string(), reason);
  fmt::print("present    {} key{} already in the database\n", wanted.present, plural(wanted.present));
  if (merged.ignored > 0) fmt::print("ignored    {} result{} not asked for\n", merged.ignored, plural(merged.ignored));
  if (args.compare) print_compare(plan, (*planned)->catalog, gpu, *db);
  if (merged.missing > 0)
    return report(Error{fmt::format("the timer returned nothing for {} of the {} requested keys", merged.missing,
                                    wanted.requests.size()),
                        "check the timer's messages above, or the --results file"});
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure the ops of a model's plan on this machine's device and merge them into a profile database");
  add_job_flags(cmd, &args->job, {api::OptionGroup::model, api::OptionGroup::sizes, api::OptionGroup::cluster,
                                  api::OptionGroup::parallel},
                {"cluster", "profile", "constraints"});
  cmd->add_option("--db", args->db, "Profile database (JSON) to extend; created when missing")->required();
  cmd->add_option("--device-name", args->device_name,
                  "File the measurements under this device name (default: the timer's device matched to a known GPU, or cpu)");
  cmd->add_option("--python", args->python, "Python interpreter with torch (default: the repository's .venv)");
  cmd->add_flag("--dry-run", args->dry_run, "List the keys to measure; run nothing, change nothing");
  cmd->add_option("--requests", args->requests_out, "Also write the request file here (to time on another machine)");
  cmd->add_option("--results", args->results_in,
                  "Merge this timer results file instead of running the timer (made from a --requests file)");
  cmd->add_option("--warmup", args->warmup, "Timer warm-up runs per op (default: the timer's)")->check(CLI::Range(1, 1000));
  cmd->add_option("--repeats", args->repeats, "Timed repeats per op, median taken (default: the timer's)")
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--compare", args->compare, "Print the roofline next to the measurements, per op class and per key");
  on_selected(cmd, [args] { return run_profile(*args); });
}

}  // namespace loom::cli
