// The reports of a simulated step: the HTML page (self-contained, deterministic, its embedded data
// matching the simulation), the text summary table and the JSON summary.
#include "loom/sim/html_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "loom/sim/chrome_trace.h"
#include "loom/sim/device_groups.h"
#include "loom/sim/summary_json.h"
#include "loom/sim/summary_table.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

using ::testing::HasSubstr;

// Substring checks on a whole page, without printing the page when they fail.
bool has(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

struct Reported {
  std::unique_ptr<exec::testing::PolicyPlan> plan;
  std::unique_ptr<testing::Priced> model;
  SimResult sim;
  cost::MemoryReport memory;
  StepMetrics metrics;
};

Reported reported(std::string_view policy, const policy::ParallelConfig& config, const ir::Graph* graph = nullptr) {
  Reported r;
  if (graph == nullptr) {
    r.plan = testing::classed_plan(policy, config, "gpt3-125m", ir::DType::bf16);
  } else {
    r.plan = exec::testing::policy_plan(*graph, policy, config);
    exec::assign_device_classes(r.plan->exec);
  }
  r.model = testing::priced(r.plan->exec);
  auto sim = simulate(r.plan->exec, r.model->durations);
  EXPECT_TRUE(sim) << sim.error().to_string();
  if (sim) r.sim = std::move(*sim);
  r.memory = cost::memory_usage(r.plan->exec);
  auto metrics = step_metrics(r.plan->exec, r.sim, r.memory, r.model->cluster.gpu, ops::builtin_ops(),
                              {.samples_per_step = 4, .tokens_per_step = 32});
  EXPECT_TRUE(metrics) << metrics.error().to_string();
  if (metrics) r.metrics = std::move(*metrics);
  return r;
}

const ReportLabels kLabels{"gpt3-125m (shrunk)", "dgx-a100", "dp <2> & \"tp\" 2"};

nlohmann::json embedded_data(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"loom-data\">";
  const std::size_t from = html.find(open);
  const std::size_t to = html.find("</script>", from);
  EXPECT_NE(from, std::string::npos);
  return nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()), nullptr, false);
}

TEST(HtmlReport, SelfContainedDeterministicAndMatchingTheSimulation) {
  const Reported r = reported("dp-tp", {.dp = 2, .tp = 2});
  const std::string html = html_report(kLabels, r.plan->exec, r.sim, r.metrics, r.memory);
  EXPECT_EQ(html, html_report(kLabels, r.plan->exec, r.sim, r.metrics, r.memory));
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>"));
  // Nothing is fetched: no links, sources, imports or remote URLs (the SVG namespace is a name).
  for (const char* remote : {"<link", " src=", "@import", "https://", "url("}) EXPECT_FALSE(has(html, remote)) << remote;
  EXPECT_TRUE(has(html, "dp &lt;2&gt; &amp; &quot;tp&quot; 2"));  // labels escaped
  EXPECT_TRUE(has(html, "document.body.dataset.rendered = 'ok'"));
  EXPECT_TRUE(has(html, "document.body.dataset.rendered = 'error: '"));
  EXPECT_TRUE(has(html, fmt::format("<tr><th>Step time</th><td>{}</td></tr>", format_seconds(r.sim.step_time))));
  EXPECT_TRUE(has(html, "<tr><th>Out of memory</th><td>no</td></tr>"));

  const nlohmann::json data = embedded_data(html);
  ASSERT_FALSE(data.is_discarded());
  const std::vector<DeviceGroup> groups = device_groups(r.sim);
  ASSERT_EQ(data["lanes"].size(), groups.size());
  EXPECT_EQ(data["events"].size(), r.sim.events.size());  // every simulated device has a lane here
  EXPECT_GT(r.sim.events.size(), 0u);
  for (const auto& e : data["events"]) {
    EXPECT_GE(e[2].get<double>(), 0);
    EXPECT_LE(e[2].get<double>() + e[3].get<double>(), r.sim.step_time * 1e6 + 1e-3);
  }
  EXPECT_EQ(data["memory"]["bars"].size(), 4u);
  std::int64_t curve_peak = 0;
  for (const auto& p : data["curve"]["points"]) curve_peak = std::max(curve_peak, p[1].get<std::int64_t>());
  EXPECT_EQ(curve_peak, r.memory.devices[static_cast<std::size_t>(r.metrics.max_memory_device)].peak_bytes);
  EXPECT_EQ(data["breakdown"].size(), 4u);
}

// Every simulated event of a drawn lane lies inside a drawn box of its lane and row (the sampled timeline
// leaves no busy part of the step out); returns the boxes' count.
std::size_t expect_every_event_covered(const nlohmann::json& data, const SimResult& sim) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> boxes;  // (lane, row) -> [start, end] in us
  for (const auto& e : data["events"])
    boxes[{e[0].get<int>(), e[1].get<int>()}].emplace_back(e[2].get<double>(), e[2].get<double>() + e[3].get<double>());
  std::map<int, int> lane_of;
  for (std::size_t l = 0; l < data["lanes"].size(); ++l) lane_of[data["lanes"][l]["device"].get<int>()] = static_cast<int>(l);
  for (const Event& e : sim.events) {
    const auto lane = lane_of.find(e.device);
    if (lane == lane_of.end()) continue;
    const auto& row = boxes[{lane->second, e.stream == Stream::compute ? 0 : 1}];
    const bool inside = std::ranges::any_of(row, [&](const auto& b) {
      return b.first <= e.start * 1e6 + 1e-3 && e.end * 1e6 <= b.second + 1e-3;
    });
    EXPECT_TRUE(inside) << e.name << " on device " << e.device << " at " << e.start;
    if (!inside) break;
  }
  return data["events"].size();
}

TEST(HtmlReport, SamplesTheTimelineEvenlyAndSaysSo) {
  const Reported r = reported("dp", {.dp = 2});
  const std::string html = html_report(kLabels, r.plan->exec, r.sim, r.metrics, r.memory, {.max_events = 10});
  const nlohmann::json data = embedded_data(html);
  EXPECT_LE(expect_every_event_covered(data, r.sim), 10u);
  EXPECT_TRUE(has(html, fmt::format("draws {} boxes for its {} events", data["events"].size(), r.sim.events.size())));
  EXPECT_TRUE(has(html, " events: "));  // a merged box names its events' count
}

// A pipeline's step drawn within a small budget: every lane (stage) still shows its forward, backward and
// optimizer work, and the boxes stay within the budget (drawing only the longest events, as the report
// did before, can leave a whole pass out).
TEST(HtmlReport, LargePipelineShowsEveryPassWithinTheBudget) {
  // gpt3-125m shrunk in width, at its 12 layers, 16 samples in 16 micro-batches.
  auto forward = models::build_model("gpt3-125m", {.batch = 16, .dtype = ir::DType::bf16, .layers = 12, .shrink = true});
  ASSERT_TRUE(forward) << forward.error().to_string();
  auto graph = ir::build_training_graph(*forward, ops::builtin_ops(), {});
  ASSERT_TRUE(graph) << graph.error().to_string();
  const Reported r = reported("megatron", {.pp = 4, .micro_batches = 16}, &*graph);
  constexpr std::size_t kBudget = 400;  // 100 boxes a lane
  ASSERT_GT(r.sim.events.size(), 4 * kBudget);
  const std::string html = html_report(kLabels, r.plan->exec, r.sim, r.metrics, r.memory, {.max_events = kBudget});
  const nlohmann::json data = embedded_data(html);
  ASSERT_EQ(data["lanes"].size(), 4u);
  EXPECT_LE(expect_every_event_covered(data, r.sim), kBudget);
  std::map<int, std::set<int>> kinds;  // lane -> kinds drawn on its compute row
  for (const auto& e : data["events"])
    if (e[1] == 0) kinds[e[0].get<int>()].insert(e[4].get<int>());
  for (int lane = 0; lane < 4; ++lane)
    for (int kind : {0, 1, 2}) EXPECT_TRUE(kinds[lane].contains(kind)) << "lane " << lane << " lacks " << data["kinds"][kind];
}

TEST(SummaryTable, HeadlineAndOneRowPerGroup) {
  const Reported r = reported("dp", {.dp = 4});
  const std::string text = summary_table(kLabels, r.sim, r.metrics);
  EXPECT_EQ(text, summary_table(kLabels, r.sim, r.metrics));
  EXPECT_THAT(text, HasSubstr("gpt3-125m (shrunk) on dgx-a100, policy dp <2>"));
  EXPECT_THAT(text, HasSubstr("  step time      " + format_seconds(r.sim.step_time) + "\n"));
  EXPECT_THAT(text, HasSubstr(fmt::format("  MFU            {:.1f} %", 100 * r.metrics.mfu)));
  EXPECT_THAT(text, HasSubstr("  out of memory  no\n"));
  EXPECT_THAT(text, HasSubstr("  simulated      1 of 4 devices, one per device class\n"));
  EXPECT_THAT(text, HasSubstr("\n  0-3 "));  // the one class's row
}

TEST(SummaryJson, StatesTheMetrics) {
  const Reported r = reported("dp", {.dp = 2});
  const nlohmann::json j = summary_json(kLabels, r.sim, r.metrics);
  EXPECT_EQ(j["policy"], kLabels.policy);
  EXPECT_EQ(j["devices"], 2);
  EXPECT_EQ(j["simulated_devices"], r.sim.simulated_devices.size());
  EXPECT_EQ(j["step_time_s"].get<double>(), r.metrics.step_time);
  EXPECT_EQ(j["mfu"].get<double>(), r.metrics.mfu);
  EXPECT_EQ(j["precision"], "bf16");
  ASSERT_EQ(j["per_device"].size(), 2u);
  EXPECT_EQ(j["per_device"][1]["peak_bytes"].get<std::int64_t>(), r.memory.devices[1].peak_bytes);
  EXPECT_EQ(j["per_device"][1]["peak_by_role"]["parameter"].get<std::int64_t>(),
            r.memory.devices[1].at_peak[ir::TensorRole::parameter]);
  EXPECT_EQ(j.dump(), summary_json(kLabels, r.sim, r.metrics).dump());
}

// A symmetric simulation's trace: one process for the class, named for its devices.
TEST(ChromeTraceOfClasses, OneProcessPerSimulatedDevice) {
  const Reported r = reported("dp", {.dp = 4});
  ASSERT_EQ(r.sim.simulated_devices, (std::vector<int>{0}));
  const auto trace = nlohmann::json::parse(chrome_trace_json(r.plan->exec, r.sim));
  std::map<int, std::string> processes;
  std::size_t events = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int>()] = e["args"]["name"];
    events += e["ph"] == "X";
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{0, "class 0: device 0 (for devices 0-3)"}}));
  EXPECT_EQ(events, r.sim.events.size());
}

TEST(ReportFormats, SecondsAndDeviceRanges) {
  EXPECT_EQ(format_seconds(1.23456), "1.235 s");
  EXPECT_EQ(format_seconds(0.0123456), "12.35 ms");
  EXPECT_EQ(format_seconds(8.5e-4), "850.0 us");
  EXPECT_EQ(format_seconds(0), "0.000 s");
  EXPECT_EQ(device_ranges({0, 1, 2, 3, 8, 10, 11}), "0-3, 8, 10-11");
  EXPECT_EQ(device_ranges({0, 2, 4, 6}, 2), "0, 2, ...");
  EXPECT_EQ(device_ranges({}), "");
}

}  // namespace
}  // namespace loom::sim
