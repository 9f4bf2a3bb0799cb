// trace.json's devices (sim/trace_devices.h): one track per device class by default, every device or a
// list on request, a device not simulated drawn with its representative's events.
#include "loom/sim/trace_devices.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include <nlohmann/json.hpp>

#include "loom/sim/chrome_trace.h"
#include "sim_support.h"

namespace loom::sim {
namespace {

struct Simulated {
  std::unique_ptr<exec::testing::PolicyPlan> plan;
  std::unique_ptr<testing::Priced> model;
  SimResult symmetric;  // one program per device class
  SimResult full;       // every device
};

Simulated simulated(std::string_view policy, const policy::ParallelConfig& config) {
  Simulated s;
  s.plan = testing::classed_plan(policy, config);
  s.model = testing::priced(s.plan->exec);
  auto symmetric = simulate(s.plan->exec, s.model->durations);
  auto full = simulate(s.plan->exec, s.model->durations, {.use_device_classes = false});
  EXPECT_TRUE(symmetric && full);
  if (symmetric) s.symmetric = std::move(*symmetric);
  if (full) s.full = std::move(*full);
  return s;
}

using XEvent = std::tuple<int, int, double, double, std::string, std::string>;  // pid, tid, ts, dur, cat, name

struct Parsed {
  std::map<int, std::string> processes;  // pid -> name
  std::vector<XEvent> events;            // sorted
};

Parsed parse(const std::string& text) {
  Parsed p;
  const auto trace = nlohmann::json::parse(text);
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") p.processes[e["pid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X")
      p.events.emplace_back(e["pid"].get<int>(), e["tid"].get<int>(), e["ts"].get<double>(), e["dur"].get<double>(),
                            e["cat"].get<std::string>(), e["name"].get<std::string>());
  }
  std::ranges::sort(p.events);
  return p;
}

std::string trace(const Simulated& s, const SimResult& result, std::string_view devices) {
  auto tracks = trace_tracks(s.plan->exec, result, parse_trace_devices(devices).value());
  EXPECT_TRUE(tracks) << tracks.error().to_string();
  return tracks ? chrome_trace_json(s.plan->exec, result, *tracks) : std::string("{}");
}

TEST(ParseTraceDevices, FormsAndErrors) {
  EXPECT_EQ(parse_trace_devices("classes").value(), TraceDevices{});
  EXPECT_EQ(parse_trace_devices("all").value(), (TraceDevices{.all = true, .listed = {}}));
  EXPECT_EQ(parse_trace_devices("5,0-2,1").value().listed, (std::vector<int>{0, 1, 2, 5}));
  for (std::string_view text : {"classes", "all", "0-2,5", "7"})
    EXPECT_EQ(to_string(parse_trace_devices(text).value()), text);
  for (std::string_view bad : {"x", "1,", "3-1", "-1", "1-"}) EXPECT_FALSE(parse_trace_devices(bad)) << bad;
}

// The default: one track per class, named by its class and the devices it stands for.
TEST(TraceTracks, OnePerClassNamedByItsDevices) {
  const Simulated s = simulated("megatron", {.dp = 2, .pp = 2, .micro_batches = 2});
  ASSERT_EQ(s.plan->exec.representatives.size(), 2u);
  const Parsed p = parse(trace(s, s.symmetric, "classes"));
  EXPECT_EQ(p.processes, (std::map<int, std::string>{{0, "class 0: device 0 (for devices 0-1)"},
                                                     {2, "class 1: device 2 (for devices 2-3)"}}));
  EXPECT_EQ(p.events.size(), s.symmetric.events.size());
  // The same classes of a full simulation: the representatives' own events, and the label says so.
  const Parsed full = parse(trace(s, s.full, "classes"));
  EXPECT_TRUE(full.processes.at(0).ends_with("each simulated, times may differ: --trace-devices all draws every one)"))
      << full.processes.at(0);
  EXPECT_EQ(full.events, p.events);
}

// Every device of a symmetric simulation, drawn from its representative, is the full simulation's trace
// event for event: the representatives' times are every device's (symmetry.h). (Names differ: a device
// not simulated shows its representative's sub-op names, as its track's label says.)
TEST(TraceTracks, AllDevicesOfClassesEqualTheFullSimulation) {
  const Simulated s = simulated("megatron", {.dp = 2, .tp = 2, .pp = 2, .micro_batches = 2});
  ASSERT_TRUE(s.symmetric.symmetric());
  const Parsed from_classes = parse(trace(s, s.symmetric, "all"));
  const Parsed from_full = parse(trace(s, s.full, "all"));
  EXPECT_EQ(from_classes.processes.size(), 8u);
  EXPECT_EQ(from_full.processes.at(5), "device 5");
  EXPECT_TRUE(from_classes.processes.at(5).starts_with("device 5 (the times of its class representative"));
  ASSERT_EQ(from_classes.events.size(), s.full.events.size());
  const auto timing = [](XEvent e) {
    std::get<5>(e).clear();
    return e;
  };
  std::vector<XEvent> a, b;
  std::ranges::transform(from_classes.events, std::back_inserter(a), timing);
  std::ranges::transform(from_full.events, std::back_inserter(b), timing);
  std::ranges::sort(a);
  std::ranges::sort(b);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(TraceTracks, ListedDevicesAndOutOfRange) {
  const Simulated s = simulated("dp", {.dp = 4});
  const Parsed p = parse(trace(s, s.symmetric, "1,3"));
  EXPECT_EQ(p.processes.size(), 2u);
  EXPECT_EQ(p.events.size(), 2 * s.symmetric.events.size());
  for (const XEvent& e : p.events) EXPECT_TRUE(std::get<0>(e) == 1 || std::get<0>(e) == 3);
  const auto bad = trace_tracks(s.plan->exec, s.symmetric, parse_trace_devices("2,4").value());
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "device 4 is not in the plan, which has 4 devices");
}

}  // namespace
}  // namespace loom::sim
