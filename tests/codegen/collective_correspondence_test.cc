// The program that trains is the ExecPlan that was checked, verified and simulated (DESIGN.md, "Data
// flow"): the collectives the generated rank programs call, read back from their text, are exactly the
// ExecPlan's Collective, CollectiveStart and CollectiveWait instructions, one to one, in order, with
// their kinds, groups and tags, on every rank of plans of several policies (gradient buckets and
// ZeRO-3's prefetched parameter gathers among them).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>

#include "testing/policy_plans.h"
#include "loom/codegen/rank_programs.h"
#include "loom/core/strings.h"

namespace loom::codegen {
namespace {

using exec::testing::policy_plan;
using exec::testing::shrunk_training_graph;

// One communication call: its kind (the runtime method), group and tag (a wait: its start's).
struct Call {
  std::string kind;
  std::vector<int> group;
  std::int64_t tag = 0;
  std::size_t buffers = 1;  // a start's inputs, a wait's outputs

  bool operator==(const Call&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Call& c) {
  out << c.kind << " #" << c.tag << " (";
  for (int g : c.group) out << g << ",";
  return out << ") x" << c.buffers;
}

std::vector<int> ints(const std::string& tuple) {
  std::vector<int> out;
  for (const std::string& item : split(tuple, ','))
    if (const std::string t(trim(item)); !t.empty()) out.push_back(std::stoi(t));
  return out;
}

std::size_t names(const std::string& list) {
  std::size_t n = 0;
  for (const std::string& item : split(list, ',')) n += !trim(item).empty();
  return n;
}

// The calls of one generated module, from its statements.
std::vector<Call> calls_in(const std::string& module) {
  static const std::regex blocking(R"(^    \w+ = rt\.(all_reduce|reduce_scatter|all_gather|all_to_all)\(\w+, group=\(([^)]*)\), tag=(-?\d+), )");
  static const std::regex start(R"(^    (\w+) = rt\.all_reduce_start\(\(([^)]*)\), group=\(([^)]*)\), bucket=(\d+)\)$)");
  static const std::regex gather(R"(^    (\w+) = rt\.all_gather_start\(\(([^)]*)\), group=\(([^)]*)\), tag=(\d+), ins=)");
  static const std::regex wait(R"(^    (.*) = rt\.wait\((\w+)\)$)");
  std::vector<Call> out;
  std::map<std::string, Call> handles;  // a start's handle -> the start
  for (const std::string& line : split(module, '\n')) {
    std::smatch m;
    if (std::regex_search(line, m, blocking)) {
      out.push_back({m[1], ints(m[2]), std::stoll(m[3]), 1});
    } else if (std::regex_match(line, m, start) || std::regex_search(line, m, gather)) {
      Call c{line.find("rt.all_gather_start(") != std::string::npos ? "all_gather_start" : "all_reduce_start", ints(m[3]),
             std::stoll(m[4]), names(m[2])};
      handles[m[1]] = c;
      out.push_back(c);
    } else if (std::regex_match(line, m, wait)) {
      const auto it = handles.find(m[2]);
      EXPECT_NE(it, handles.end()) << "waits for a handle no earlier start made: " << line;
      if (it == handles.end()) continue;
      out.push_back({"wait", it->second.group, it->second.tag, names(m[1])});
    } else {
      EXPECT_EQ(line.find("rt.all_"), std::string::npos) << "a collective call the test does not read: " << line;
    }
  }
  return out;
}

std::string method(comm::Primitive kind) {
  std::string name(comm::name(kind));
  std::ranges::replace(name, '-', '_');
  return name;
}

// What the ExecPlan says rank r calls.
std::vector<Call> calls_of(const exec::ExecPlan& exec, int r) {
  std::vector<Call> out;
  std::map<std::int64_t, Call> started;
  for (const exec::Instruction& in : exec.programs[static_cast<std::size_t>(r)]) {
    if (const auto* c = std::get_if<exec::Collective>(&in)) {
      out.push_back({method(c->kind), c->group, c->tag, 1});
    } else if (const auto* s = std::get_if<exec::CollectiveStart>(&in)) {
      Call call{method(s->kind) + "_start", s->group, s->tag, s->inputs.size()};
      started[s->tag] = call;
      out.push_back(call);
    } else if (const auto* w = std::get_if<exec::CollectiveWait>(&in)) {
      const Call& s = started.at(w->tag);
      out.push_back({"wait", s.group, s.tag, s.buffers});
    }
  }
  return out;
}

// Which asynchronous kinds a plan's passes start: gradient buckets (all-reduce), prefetched parameter
// gathers (all-gather).
struct Starts {
  bool buckets = false, gathers = false;
};

void expect_one_to_one(const exec::ExecPlan& exec, Starts expect) {
  Expected<RankPrograms> emitted = emit_rank_programs(exec, "correspondence");
  ASSERT_TRUE(emitted) << emitted.error().to_string();
  std::size_t buckets = 0, gathers = 0;
  for (int r = 0; r < exec.num_devices; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    const std::vector<Call> printed = calls_in(emitted->modules[static_cast<std::size_t>(r)]);
    const std::vector<Call> planned = calls_of(exec, r);
    ASSERT_EQ(printed.size(), planned.size());
    for (std::size_t k = 0; k < planned.size(); ++k) EXPECT_EQ(printed[k], planned[k]) << "call " << k;
    buckets += static_cast<std::size_t>(std::ranges::count(planned, std::string("all_reduce_start"), &Call::kind));
    gathers += static_cast<std::size_t>(std::ranges::count(planned, std::string("all_gather_start"), &Call::kind));
  }
  EXPECT_EQ(buckets > 0, expect.buckets);
  EXPECT_EQ(gathers > 0, expect.gathers);
}

TEST(CollectiveCorrespondence, GeneratedCallsAreTheExecPlansInstructions) {
  struct Case {
    std::string model, policy;
    policy::ParallelConfig config;
    Starts starts;  // the passes bucket gradients, prefetch parameters
  };
  const std::vector<Case> cases = {
      {"gpt3-125m", "dp", {.dp = 2}, {true, false}},
      {"gpt3-125m", "dp-tp", {.dp = 2, .tp = 2}, {true, false}},
      {"gpt3-125m", "megatron", {.dp = 2, .pp = 2, .micro_batches = 2}, {true, false}},  // 1F1B
      {"gpt3-125m", "megatron", {.tp = 2, .pp = 2, .micro_batches = 4}, {false, false}},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 1}, {false, false}},
      {"gpt3-125m", "zero", {.dp = 2, .zero = 3}, {false, true}},
      {"gpt3-125m", "zero", {.dp = 2, .micro_batches = 2, .zero = 3}, {false, true}},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .micro_batches = 2, .zero = 3}, {false, true}},
      {"llama3-8b", "megatron", {.dp = 2, .tp = 2, .sequence_parallel = true}, {true, false}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.policy);
    auto p = policy_plan(shrunk_training_graph(c.model, ir::DType::f32), c.policy, c.config, /*exec_passes=*/true);
    expect_one_to_one(p->exec, c.starts);
  }
}

// With sends only (the general fallback), reductions are exchanges of value parts; the passes make them
// all-reduces and bucket the gradients', and the programs call exactly those.
TEST(CollectiveCorrespondence, ExchangesTurnedAllReducesToo) {
  auto p = policy_plan(shrunk_training_graph("gpt3-125m", ir::DType::f32), "dp-tp", {.dp = 2, .tp = 2},
                       /*exec_passes=*/false, /*layout_search=*/false);
  const exec::ExecPassStats stats = exec::run_exec_passes(p->exec);
  EXPECT_GT(stats.exchanges, 0);
  EXPECT_GT(stats.buckets, 0);
  ASSERT_TRUE(exec::check_exec_plan(p->exec));
  expect_one_to_one(p->exec, {true, false});
}

}  // namespace
}  // namespace loom::codegen
