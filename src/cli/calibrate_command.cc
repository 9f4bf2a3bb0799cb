// `loom calibrate` (docs/calibration.md): plans a set of small models on this machine's CPU cluster, emits and
// runs each with the runtime (python/loom_profile/plan_runs.py), fits the cost model's free constants
// (calibration_model.h) on some plans and predicts the rest; prints per plan the measured and predicted step
// and peak memory, and the held-out plans' median |error| and Spearman correlation; writes the fitted
// constants as a cluster file.
#include <algorithm>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calibration_model.h"
#include "calibration_plans.h"
#include "calibration_runs.h"
#include "calibration_report.h"
#include "commands.h"
#include "loom/api/emit_programs.h"
#include "loom/cluster/cluster_file.h"
#include "loom/core/atomic_file.h"
#include "loom/core/input_file.h"
#include "loom/core/strings.h"
#include "profile_timer.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct CalibrateArgs {
  std::string plans;  // "": the default set
  int fit = 10;
  std::string out = "calibration";
  std::string cluster = "cpu-host";
  std::string profile;  // "": data/profiles/<the cluster's device>.json when present
  std::string measured;
  std::string doc;
  std::string python;
  std::string fix;  // NAME=VALUE,...: constants pinned, not fitted
  int steps = 5;
  int repeats = 3;
  bool no_links = false;  // else each kind of link is measured apart after the plans (python -m loom_profile.cluster)
  bool json = false;
  bool list = false;
};

// The fitted plans: `fit` of `n`, spread evenly over the set (its order mixes models, policies and sizes).
std::vector<bool> fitted_subset(std::size_t n, std::size_t fit) {
  std::vector<bool> fitted(n, false);
  for (std::size_t j = 0; j < fit; ++j) fitted[j * n / fit] = true;
  return fitted;
}

// Whether `--fix` names the constant (it then is fixed, not measured).
bool fixes_name(const std::string& fix, const std::string& name) {
  for (const std::string& item : split(fix, ','))
    if (trim(std::string_view(item).substr(0, item.find('='))) == name) return true;
  return false;
}

Expected<std::unique_ptr<api::Job>> plan_one(const CalibrationPlan& plan, const CalibrateArgs& args,
                                             const std::string& profile) {
  LOOM_ASSIGN_OR_RETURN(api::JobOptions options, calibration_options(plan));
  options.cluster = args.cluster;
  options.profile = profile;
  options.fold = api::Fold::off;  // the runtime needs every rank's program
  return with_context(api::plan_job(options), fmt::format("plan '{}'", plan.name));
}

Expected<CalibrationReport> calibrate(const CalibrateArgs& args) {
  std::vector<CalibrationPlan> plans = default_calibration_plans();
  if (!args.plans.empty()) {
    LOOM_ASSIGN_OR_RETURN(plans, with_context(read_calibration_plans(args.plans), "option --plans"));
  }
  const std::size_t fit = static_cast<std::size_t>(args.fit);
  if (args.fit < 1 || fit >= plans.size())
    return fail(fmt::format("option --fit {}: the fit needs at least one plan and one left to predict, of {}", args.fit,
                            plans.size()),
                plans.size() < 2 ? "give a plan set of two plans or more"
                                 : fmt::format("give --fit from 1 to {} (from {}, the constants' number, to determine "
                                               "them all)", plans.size() - 1, calibration_parameters({}).size()));
  if (!args.fix.empty()) {  // a bad --fix fails before anything runs
    std::vector<cost::FitParameter> names = calibration_parameters({});
    LOOM_RETURN_IF_ERROR(fix_parameters(names, args.fix));
  }
  // The runner also locates the repository (its python/ and data/).
  LOOM_ASSIGN_OR_RETURN(const TimerSetup python, find_timer(args.python));
  std::string profile = args.profile;

  // Plan every one first: a bad plan fails before anything runs.
  std::vector<CalibrationModel> models;
  std::vector<std::string> names, dirs;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    fmt::print(stderr, "calibrate  planning {}/{} {}\n", i + 1, plans.size(), plans[i].name);
    if (profile.empty() && i == 0) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<api::Job> probe, plan_one(plans[i], args, ""));
      const fs::path db = python.package_root.parent_path() / "data" / "profiles" / (probe->cluster.gpu.name + ".json");
      std::error_code ec;
      if (fs::is_regular_file(db, ec)) profile = db.string();
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<api::Job> job, plan_one(plans[i], args, profile));
    if (job->exec.num_devices < 1) return fail(fmt::format("plan '{}' has no devices", plans[i].name));
    names.push_back(plans[i].name);
    dirs.push_back((fs::path(args.out) / "plans" / plans[i].name).string());
    if (args.measured.empty()) {
      LOOM_RETURN_IF_ERROR(with_context(api::write_rank_programs(*job, dirs.back()),
                                        fmt::format("emitting plan '{}'", plans[i].name)));
    }
    LOOM_ASSIGN_OR_RETURN(CalibrationModel model, CalibrationModel::make(std::move(job)));
    models.push_back(std::move(model));
  }

  PlanRuns measured;
  if (args.measured.empty()) {
    // The links among as many processes as cores: more share the cores, which comm_sharing prices.
    const int links_world = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
    LOOM_ASSIGN_OR_RETURN(measured, run_plans(python, names, dirs, args.steps, args.repeats,
                                              args.no_links ? 0 : links_world, args.out));
    LOOM_RETURN_IF_ERROR(write_file_atomically((fs::path(args.out) / "measured.json").string(), plan_runs_json(measured),
                                               "the measured runs"));
  } else {
    LOOM_ASSIGN_OR_RETURN(const std::string text,
                          with_context(read_input_file(args.measured, "measured runs", "loom calibrate --out DIR writes DIR/measured.json"),
                                       "option --measured"));
    LOOM_ASSIGN_OR_RETURN(measured, parse_plan_runs(text, args.measured, names));
  }
  const std::vector<PlanRun>& runs = measured.runs;

  const cluster::Cluster& base = models.front().job().cluster;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<bool> fitted = fitted_subset(plans.size(), fit);
  std::vector<double> fit_measured;
  std::vector<const CalibrationModel*> fit_models;
  for (std::size_t i = 0; i < plans.size(); ++i)
    if (fitted[i]) {
      fit_measured.push_back(runs[i].measured_step());
      fit_models.push_back(&models[i]);
    }
  std::vector<cost::FitParameter> parameters = calibration_parameters(base);
  const std::vector<std::string> measured_links = pin_links(parameters, measured.links);
  if (!args.fix.empty()) LOOM_RETURN_IF_ERROR(fix_parameters(parameters, args.fix));
  const cost::Predictor predict = [&](std::span<const double> values) -> Expected<std::vector<double>> {
    const cluster::Cluster c = calibrated_cluster(base, cores, parameters, values);
    std::vector<double> steps;
    for (const CalibrationModel* m : fit_models) {
      LOOM_ASSIGN_OR_RETURN(const double t, m->step_time(c));
      steps.push_back(t);
    }
    return steps;
  };
  const auto free = static_cast<std::size_t>(
      std::ranges::count_if(parameters, [](const cost::FitParameter& p) { return p.lower < p.upper; }));
  fmt::print(stderr, "calibrate  fitting {} constants on {} plans ({} pinned)\n", free, fit, parameters.size() - free);
  LOOM_ASSIGN_OR_RETURN(const cost::FitResult result, cost::fit_constants(parameters, fit_measured, predict));

  CalibrationReport report;
  report.cluster = calibrated_cluster(base, cores, parameters, result.values);
  report.cluster.name = base.name + "-calibrated";
  report.steps = static_cast<int>(runs.front().rounds.front().size());
  report.rounds = static_cast<int>(runs.front().rounds.size());
  report.nice = measured.nice;
  report.group_nice = measured.group_nice;
  report.profile = profile;
  report.fit = result;
  for (const cost::FitParameter& p : parameters) {
    report.constant_names.push_back(p.name);
    report.constant_sources.push_back(p.lower < p.upper                             ? ""
                                      : std::ranges::find(measured_links, p.name) != measured_links.end() &&
                                                !fixes_name(args.fix, p.name)       ? "measured"
                                                                                    : "fixed");
  }
  report.links_world = measured.links.empty() ? 0 : measured.links_world;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const api::Job& job = models[i].job();
    LOOM_ASSIGN_OR_RETURN(const double predicted, models[i].step_time(report.cluster));
    PlanRow row{.name = plans[i].name, .flags = join(plans[i].flags, " "), .processes = job.exec.num_devices,
                .fitted = fitted[i], .measured_s = runs[i].measured_step(), .predicted_s = predicted,
                .peak_measured = runs[i].peak_bytes, .peak_predicted = {}, .round_steps = {},
                .load = runs[i].load};
    for (std::size_t r = 0; r < runs[i].rounds.size(); ++r) row.round_steps.push_back(runs[i].round_step(r));
    for (const cost::DeviceMemory& d : job.memory.devices) row.peak_predicted.push_back(d.peak_bytes);
    if (row.peak_measured.size() != row.peak_predicted.size())
      return fail(fmt::format("plan '{}' ran {} ranks but has {} devices", row.name, row.peak_measured.size(),
                              row.peak_predicted.size()),
                  "measure the plan set again (its plans changed since the --measured file)");
    report.plans.push_back(std::move(row));
  }
  const std::string cluster_path = (fs::path(args.out) / "cluster.yaml").string();
  LOOM_RETURN_IF_ERROR(write_file_atomically(cluster_path, cluster::cluster_to_yaml(report.cluster), "the fitted cluster"));
  report.files.push_back(cluster_path);
  if (!args.doc.empty()) {
    LOOM_RETURN_IF_ERROR(with_context(write_file_atomically(args.doc, calibration_markdown(report), "the calibration doc"),
                                      "option --doc"));
    report.files.push_back(args.doc);
  }
  return report;
}

int run_calibrate(const CalibrateArgs& args) {
  if (args.list) {  // the set as a plan file, a start for --plans
    Expected<std::vector<CalibrationPlan>> plans =
        args.plans.empty() ? Expected<std::vector<CalibrationPlan>>(default_calibration_plans())
                           : with_context(read_calibration_plans(args.plans), "option --plans");
    if (!plans) return cli::report(plans.error());
    for (const CalibrationPlan& p : *plans) fmt::print("{} {}\n", p.name, join(p.flags, " "));
    return 0;
  }
  Expected<CalibrationReport> report = calibrate(args);
  if (!report) return cli::report(report.error());
  fmt::print("{}", args.json ? calibration_json(*report).dump(1) + "\n" : calibration_text(*report));
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Run a set of plans on this machine, fit the cost model's constants on some, predict the others");
  cmd->add_option("--plans", args->plans, "Plan file: one plan a line, a name then `loom plan` flags (default: the built-in set)");
  cmd->add_option("--fit", args->fit, "Plans the constants are fitted on (spread over the set); the rest are predicted")
      ->default_str("10");
  cmd->add_option("--out", args->out, "Directory for the emitted plans, measured.json and the fitted cluster.yaml")
      ->default_str("calibration");
  cmd->add_option("--cluster", args->cluster, "The machine as a cluster (preset or file)")->default_str("cpu-host");
  cmd->add_option("--profile", args->profile,
                  "Profile database of the op times (default: data/profiles/<device>.json when present)");
  cmd->add_option("--steps", args->steps, "Steps per plan and round; the median of those after the first is the round's")
      ->check(CLI::Range(2, 100))
      ->default_str("5");
  cmd->add_option("--repeats", args->repeats,
                  "Rounds: every plan runs once per round; a plan's step is its fastest round's (load only adds time)")
      ->check(CLI::Range(1, 20))
      ->default_str("3");
  cmd->add_flag("--no-links", args->no_links,
                "Do not measure gloo's all-reduce, all-gather, reduce-scatter and sends apart after the plans: fit "
                "the link constants on the plans instead");
  cmd->add_option("--fix", args->fix, "Constants pinned, not fitted: NAME=VALUE[,NAME=VALUE] (SI units)");
  cmd->add_option("--measured", args->measured, "Fit on a measured.json of an earlier run instead of running the plans");
  cmd->add_option("--doc", args->doc, "Also write the report as Markdown here (docs/calibration.md)");
  cmd->add_option("--python", args->python, "Python interpreter with torch (default: the repository's .venv)");
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  cmd->add_flag("--list", args->list, "Print the plan set as a plan file and stop");
  on_selected(cmd, [args] { return run_calibrate(*args); });
}

}  // namespace loom::cli
