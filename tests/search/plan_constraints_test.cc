// search/plan_constraints.h: reading (every error names the file, the entry and a fix), patterns,
// binding to a model (patterns that match nothing, identifiers no op has), infeasible files naming both
// conflicting entries, the searches within a file (api::auto_search, plan_or_search), and a property:
// the checker's verdict on random constraint subsets agrees with the plans the policy makes, read from
// their sub-ops alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "loom/api/auto_search.h"
#include "loom/api/baseline_search.h"
#include "loom/api/resolve_request.h"
#include "loom/policy/policy.h"
#include "loom/search/plan_constraints.h"
#include "testing/small_search_job.h"

namespace loom::search {
namespace {

Expected<PlanConstraints> parse(std::string_view text) { return parse_plan_constraints(text, "c.yaml"); }

// The error of parsing `text`, which must fail.
Error parse_error(std::string_view text) {
  Expected<PlanConstraints> c = parse(text);
  EXPECT_FALSE(c) << text;
  return c ? Error{} : c.error();
}

TEST(ParsePlanConstraints, ReadsEverySection) {
  auto c = parse(R"(
partition:
  - ops: layers.*.mlp.fc1
    dims: [o, replicate]
    degrees: [2, 4]
  - types: linear
    dims: o
replicate: [layers.*.ln1, {types: [layer_norm]}]
placement:
  stages: 2
  layers.0-1: stage 0
  layers.2-3: 1
schedule: {kinds: [1f1b, interleaved], micro_batches: [4, 8], micro_batch_size: 2}
degrees: {dp: [1, 2], tp: 2, pp: [2], zero: [0, 1], recompute: [none, full], offload: none, overlap: [none],
          sequence_parallel: [true, false]}
)");
  ASSERT_TRUE(c) << c.error().to_string();
  ASSERT_EQ(c->partition.size(), 2u);
  EXPECT_EQ(c->partition[0].entry, (EntryName{"partition[0]", 3}));
  EXPECT_EQ(c->partition[0].ops, (std::vector<OpPattern>{{"layers.*.mlp.fc1", false}}));
  EXPECT_EQ(c->partition[0].dims, std::vector<std::string>{"o"});
  EXPECT_TRUE(c->partition[0].replicate);
  EXPECT_EQ(c->partition[0].degrees, (std::vector<int>{2, 4}));
  EXPECT_EQ(c->partition[1].ops, (std::vector<OpPattern>{{"linear", true}}));
  EXPECT_FALSE(c->partition[1].replicate);
  ASSERT_EQ(c->replicate.size(), 2u);
  EXPECT_EQ(c->replicate[1].ops, (std::vector<OpPattern>{{"layer_norm", true}}));
  EXPECT_EQ(c->stages.values, std::vector<int>{2});
  ASSERT_EQ(c->placement.size(), 2u);
  EXPECT_EQ(c->placement[0].ops.text, "layers.0-1");
  EXPECT_EQ(c->placement[1].stage, 1);
  EXPECT_EQ(c->placement[1].entry.path, "placement.layers.2-3");
  EXPECT_EQ(c->schedules.values, (std::vector<std::string>{"1f1b", "interleaved"}));
  EXPECT_EQ(c->micro_batch_size.values, std::vector<std::int64_t>{2});
  EXPECT_EQ(c->tp.values, std::vector<int>{2});
  EXPECT_EQ(c->recompute.values, (std::vector<std::string>{"none", "full"}));
  EXPECT_EQ(c->sequence_parallel.values, (std::vector<bool>{true, false}));
}

TEST(ParsePlanConstraints, JsonIsAccepted) {
  auto c = parse(R"({"degrees": {"tp": [2, 4]}, "replicate": ["layers.*.ln1"]})");
  ASSERT_TRUE(c) << c.error().to_string();
  EXPECT_EQ(c->tp.values, (std::vector<int>{2, 4}));
  EXPECT_EQ(c->replicate.size(), 1u);
}

// Found by fuzz/cluster_fuzz.cc, the same yaml-cpp 0.7 loop: `--constraints` hung on a stray comma.
TEST(ParsePlanConstraints, AStrayCommaIsAnErrorNotAHang) {
  const auto constraints = parse_plan_constraints("degrees: {tp: [2, 4]}\n,\n", "c.yaml");
  ASSERT_FALSE(constraints);
  EXPECT_EQ(constraints.error().message,
            "constraints file 'c.yaml': malformed YAML at line 2, column 1: a ',' outside [ ] or { }");
}

TEST(ParsePlanConstraints, EmptyFileConstrainsNothing) {
  auto c = parse("");
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, PlanConstraints{.source = "c.yaml"});
}

// Each malformed file: the error names the file and the entry (with its line), and says how to fix it.
TEST(ParsePlanConstraints, EachErrorNamesFileEntryAndFix) {
  struct Case {
    std::string text, entry, what;
  };
  const std::vector<Case> cases = {
      {"degree: {tp: 2}", "'degree' (line 1)", "unknown key"},
      {"degrees:\n  tq: 2", "'degrees.tq' (line 2)", "unknown key"},
      {"degrees:\n  tp: 2\n  tp: 4", "'degrees.tp' (line 3)", "given twice"},
      {"degrees: {tp: two}", "'degrees.tp'", "'two', not a whole number"},
      {"degrees: {tp: [0]}", "'degrees.tp'", "at least 1"},
      {"degrees: {tp: []}", "'degrees.tp'", "empty list"},
      {"degrees: {zero: 4}", "'degrees.zero'", "ZeRO stage 4"},
      {"degrees: {recompute: sometimes}", "'degrees.recompute'", "'sometimes'"},
      {"degrees: {sequence_parallel: maybe}", "'degrees.sequence_parallel'", "'maybe'"},
      {"schedule: {kinds: [2f2b]}", "'schedule.kinds'", "unknown schedule '2f2b'"},
      {"partition:\n  - ops: layers..fc1\n    dims: [o]", "'partition[0].ops' (line 2)", "malformed pattern"},
      {"partition:\n  - ops: layers.5-3\n    dims: [o]", "'partition[0].ops'", "range '5-3' is empty"},
      {"partition:\n  - ops: layers.*.fc1", "'partition[0]' (line 2)", "no dims"},
      {"partition:\n  - dims: [o]", "'partition[0]'", "names no ops"},
      {"partition:\n  - ops: x\n    dims: [o]\n    degrees: [1]", "'partition[0].degrees'", "at least 2"},
      {"partition: {ops: x}", "'partition'", "not a list"},
      {"placement: {layers.0-1: stage x}", "'placement.layers.0-1'", "not a stage"},
      {"placement: {stages: [2, 4]}", "'placement.stages'", "several counts"},
      {"replicate: [{opz: x}]", "'replicate[0].opz'", "unknown key"},
  };
  for (const Case& c : cases) {
    const Error e = parse_error(c.text);
    SCOPED_TRACE(c.text);
    EXPECT_NE(e.message.find("constraints file 'c.yaml'"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find(c.entry), std::string::npos) << e.message;
    EXPECT_NE(e.message.find(c.what), std::string::npos) << e.message;
    EXPECT_NE(e.hint.find("docs/constraints.md"), std::string::npos) << e.hint;
  }
  const Error syntax = parse_error("degrees: {tp: [2");
  EXPECT_NE(syntax.message.find("malformed YAML at line"), std::string::npos) << syntax.message;
  // A second document was silently ignored (YAML::Load reads the first).
  const Error two = parse_error("degrees: {tp: [2]}\n---\nschedule: [1f1b]\n");
  EXPECT_NE(two.message.find("holds 2 YAML documents"), std::string::npos) << two.message;
  const Error missing = read_plan_constraints("/nonexistent/c.yaml").error();
  EXPECT_NE(missing.message.find("/nonexistent/c.yaml"), std::string::npos);
}

TEST(OpPatternMatches, ComponentsRangesModulesAndTypes) {
  const ir::Op fc1{.name = "layers.3.mlp.fc1", .type = "linear"};
  EXPECT_TRUE(matches({"layers.3.mlp.fc1"}, fc1));
  EXPECT_TRUE(matches({"layers.*.mlp.*"}, fc1));
  EXPECT_TRUE(matches({"layers.0-3"}, fc1));  // a module covers the ops below it
  EXPECT_TRUE(matches({"layers.2-11.mlp"}, fc1));
  EXPECT_TRUE(matches({"layers.?.mlp.fc?"}, fc1));
  EXPECT_FALSE(matches({"layers.4-11"}, fc1));
  EXPECT_FALSE(matches({"layers.3.mlp.fc"}, fc1));  // components match whole
  EXPECT_FALSE(matches({"layers.*"}, ir::Op{.name = "layers", .type = "linear"}));
  EXPECT_FALSE(matches({"mlp"}, fc1));  // names are matched from their start
  EXPECT_TRUE(matches({"lin*", true}, fc1));
  EXPECT_FALSE(matches({"layer_norm", true}, fc1));
}

// --- bound to a model -------------------------------------------------------------------------------

api::JobOptions small_job(const std::string& policy, int gpus = 4) {
  return api::testing::small_search_job("gpt3-125m", policy, gpus);
}

// A constraint file in the test's temporary directory, removed with it.
class ConstraintFile {
 public:
  explicit ConstraintFile(std::string_view text) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             fmt::format("loom-constraints-{}-{}.yaml", ::getpid(), counter++)).string();
    std::ofstream(path_) << text;
  }
  ~ConstraintFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const api::Job& loaded_job(int gpus = 4) {
  static std::map<int, std::unique_ptr<api::Job>> jobs;
  auto& job = jobs[gpus];
  if (!job) {
    api::JobOptions o = small_job("auto", gpus);
    if (gpus > 8) o.cluster = fmt::format("dgx-a100x{}", gpus / 8);
    auto loaded = api::load_job(o);
    if (!loaded) throw std::runtime_error(loaded.error().to_string());
    job = std::move(*loaded);
  }
  return *job;
}

Expected<ConstraintChecker> bind(std::string_view text, int gpus = 4) {
  LOOM_ASSIGN_OR_RETURN(PlanConstraints c, parse(text));
  const api::Job& job = loaded_job(gpus);
  return ConstraintChecker::bind(std::move(c), job.graph, job.catalog, gpus);
}

Error bind_error(std::string_view text, int gpus = 4) {
  auto c = bind(text, gpus);
  EXPECT_FALSE(c) << text;
  return c ? Error{} : c.error();
}

TEST(ConstraintCheckerBind, PatternsMustMatchAnOpAndDimsAnIdentifier) {
  Error e = bind_error("replicate: [layers.*.mlpp]");
  EXPECT_NE(e.message.find("'replicate[0]' (line 1): 'layers.*.mlpp' matches no forward op"), std::string::npos)
      << e.message;
  EXPECT_NE(e.hint.find("loom graph --text"), std::string::npos) << e.hint;
  e = bind_error("partition:\n  - types: linearr\n    dims: [o]");
  EXPECT_NE(e.message.find("type 'linearr' matches no forward op"), std::string::npos) << e.message;
  e = bind_error("partition:\n  - ops: layers.*.mlp.fc1\n    dims: [q]");
  EXPECT_NE(e.message.find("no op it matches has the identifier 'q'"), std::string::npos) << e.message;
  EXPECT_TRUE(bind("placement: {layers.0-1: stage 0}"));
}

// Infeasible files name both sides of the conflict.
TEST(ConstraintCheckerBind, InfeasibleEntriesNameBothSides) {
  Error e = bind_error("degrees: {tp: [3]}", 8);
  EXPECT_NE(e.message.find("entry 'degrees.tp' (line 1) conflicts with the job's 8 GPUs"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("no tp in [3] divides 8"), std::string::npos) << e.message;
  e = bind_error("placement:\n  stages: 2\n  layers.0: stage 2");
  EXPECT_NE(e.message.find("entries 'placement.layers.0' (line 3) and 'placement.stages' (line 2) conflict"),
            std::string::npos) << e.message;
  e = bind_error("placement:\n  layers.0-1: stage 0\n  layers.1: stage 1");
  EXPECT_NE(e.message.find("entries 'placement.layers.0-1' (line 2) and 'placement.layers.1' (line 3) conflict"),
            std::string::npos) << e.message;
  e = bind_error("placement: {stages: 2}\ndegrees: {pp: [4]}");
  EXPECT_NE(e.message.find("'placement.stages' (line 1) and 'degrees.pp' (line 2)"), std::string::npos) << e.message;
  e = bind_error("replicate: [layers.*.mlp]\npartition:\n  - ops: layers.*.mlp.fc1\n    dims: [o]");
  EXPECT_NE(e.message.find("entries 'partition[0]' (line 3) and 'replicate[0]' (line 1) conflict: op 'layers.0.mlp.fc1'"),
            std::string::npos) << e.message;
  e = bind_error("degrees: {tp: [4]}\npartition:\n  - ops: layers.*.mlp.fc1\n    dims: [o]\n    degrees: [2]");
  EXPECT_NE(e.message.find("'partition[0]' (line 3) and 'degrees.tp' (line 1)"), std::string::npos) << e.message;
}

// What no single entry rules out, a pair can: a pipeline needs at least pp micro-batches.
TEST(ConstraintCheckerRestrict, NamesThePairThatAdmitsNothing) {
  auto checker = bind("schedule: {micro_batches: [1]}\ndegrees: {pp: [2]}");
  ASSERT_TRUE(checker) << checker.error().to_string();
  auto facts = api::space_facts(loaded_job());
  ASSERT_TRUE(facts);
  auto kept = checker->restrict(enumerate_space(*facts), "auto's space", exec::Offload::none);
  ASSERT_FALSE(kept);
  EXPECT_NE(kept.error().message.find("entries 'schedule.micro_batches' (line 1) and 'degrees.pp' (line 2) conflict"),
            std::string::npos) << kept.error().message;
  auto alone = checker->restrict({}, "auto's space", exec::Offload::none);
  ASSERT_TRUE(alone);
  // One entry alone: tp 16 is outside the space (tp up to the 8 GPUs of a node).
  auto wide = bind("degrees: {tp: [16]}", 16);
  ASSERT_TRUE(wide) << wide.error().to_string();
  auto facts16 = api::space_facts(loaded_job(16));
  ASSERT_TRUE(facts16);
  kept = wide->restrict(enumerate_space(*facts16), "auto's space", exec::Offload::none);
  ASSERT_FALSE(kept);
  EXPECT_NE(kept.error().message.find("entry 'degrees.tp' (line 1) admits none of the"), std::string::npos)
      << kept.error().message;
}

// --- the searches within a file -------------------------------------------------------------------

Expected<api::BaselineResult> search_with(std::string_view text, const std::string& policy = "auto") {
  const ConstraintFile file(text);
  api::JobOptions o = small_job(policy);
  o.constraints = file.path();
  return policy == "auto" ? api::auto_search(o) : api::best_baseline(o);
}

TEST(ConstrainedSearch, TpRestrictedToTwoReturnsATpTwoPlan) {
  auto result = search_with("degrees: {tp: [2]}");
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->best->request.config.tp, 2);
  auto megatron = search_with("degrees: {tp: [2]}", "megatron-best");
  ASSERT_TRUE(megatron) << megatron.error().to_string();
  EXPECT_EQ(megatron->best->request.config.tp, 2);
  // deepspeed-best's grid is ZeRO data parallelism alone: tp 2 leaves it nothing.
  auto deepspeed = search_with("degrees: {tp: [2]}", "deepspeed-best");
  ASSERT_FALSE(deepspeed);
  EXPECT_NE(deepspeed.error().message.find("entry 'degrees.tp' (line 1) admits none of the"), std::string::npos)
      << deepspeed.error().message;
  EXPECT_NE(deepspeed.error().message.find("deepspeed-best's grid"), std::string::npos);
}

// Sequence parallelism splits the norms along the sequence: replicating them keeps tp 2 without it.
TEST(ConstrainedSearch, SequenceParallelOffWhereItsSplitsBreakTheFile) {
  const std::string text = "degrees: {tp: [2]}\nreplicate: [layers.*.ln1]";
  auto result = search_with(text);
  ASSERT_TRUE(result) << result.error().to_string();
  const api::Job& job = *result->best;
  EXPECT_EQ(job.request.config.tp, 2);
  EXPECT_FALSE(job.request.config.sequence_parallel);
  auto free = search_with("degrees: {tp: [2]}");
  ASSERT_TRUE(free);
  EXPECT_TRUE(free->best->request.config.sequence_parallel);  // the space's own choice where the model takes it
  auto c = parse(text);
  ASSERT_TRUE(c);
  EXPECT_TRUE(plan_violations(*c, job.plan, job.request.config).empty());
  EXPECT_FALSE(plan_violations(*c, free->best->plan, free->best->request.config).empty());
}

TEST(ConstrainedSearch, PlacementPinsTheStages) {
  const std::string text = "placement:\n  stages: 2\n  layers.0-1: stage 0\n  layers.2-3: stage 1";
  auto result = search_with(text);
  ASSERT_TRUE(result) << result.error().to_string();
  const api::Job& job = *result->best;
  EXPECT_EQ(job.request.config.pp, 2);
  auto c = parse(text);
  ASSERT_TRUE(c);
  ASSERT_FALSE(job.folded);
  EXPECT_TRUE(plan_violations(*c, job.plan, job.request.config).empty());
}

// The unconstrained winner, forbidden, gives way to a slower plan that keeps the file; the same file
// gives the same plan twice.
TEST(ConstrainedSearch, ExcludesTheUnconstrainedWinnerAndIsDeterministic) {
  auto free = api::auto_search(small_job("auto"));
  ASSERT_TRUE(free) << free.error().to_string();
  const policy::ParallelConfig& w = free->best->request.config;
  std::vector<std::string> tps;
  for (int tp : {1, 2, 4})
    if (tp != w.tp) tps.push_back(std::to_string(tp));
  const std::string text = fmt::format("degrees: {{tp: [{}]}}", fmt::join(tps, ", "));
  auto constrained = search_with(text);
  ASSERT_TRUE(constrained) << constrained.error().to_string();
  EXPECT_NE(constrained->best->request.config.tp, w.tp);
  EXPECT_GE(constrained->best->metrics.step_time, free->best->metrics.step_time);
  auto again = search_with(text);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->best->description, constrained->best->description);
  EXPECT_EQ(again->best->metrics.step_time, constrained->best->metrics.step_time);
}

TEST(ConstrainedSearch, AnExplicitPolicyIsCheckedAgainstTheFile) {
  const ConstraintFile file("degrees: {tp: [2]}\nreplicate: [layers.*.attn]");
  api::JobOptions o = small_job("megatron");
  o.tp = 2;
  o.constraints = file.path();
  auto refused = api::plan_or_search(o);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("entry 'replicate[0]' (line 2): tp 2 splits op 'layers.0.attn.qkv'"),
            std::string::npos) << refused.error().message;
  o.tp = 4;
  refused = api::plan_or_search(o);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("entry 'degrees.tp' (line 1): tp 4 is not in [2]"), std::string::npos)
      << refused.error().message;
  const ConstraintFile allows("degrees: {tp: [2]}");
  o.constraints = allows.path();
  o.tp = 2;
  auto planned = api::plan_or_search(o);
  ASSERT_TRUE(planned) << planned.error().to_string();
  EXPECT_EQ((*planned)->request.config.tp, 2);
}

// --- property: the checker agrees with the plans the policy makes ---------------------------------

std::string random_constraints(std::mt19937& rng) {
  const auto coin = [&] { return rng() % 2 == 0; };
  const auto subset = [&](std::vector<std::string> values) {
    std::vector<std::string> out;
    for (const std::string& v : values)
      if (coin()) out.push_back(v);
    if (out.empty()) out.push_back(values[rng() % values.size()]);
    return fmt::format("[{}]", fmt::join(out, ", "));
  };
  std::string degrees;
  if (coin()) degrees += fmt::format("  tp: {}\n", subset({"1", "2", "4"}));
  if (coin()) degrees += fmt::format("  pp: {}\n", subset({"1", "2", "4"}));
  if (coin()) degrees += fmt::format("  zero: {}\n", subset({"0", "1", "2", "3"}));
  if (coin()) degrees += fmt::format("  recompute: {}\n", subset({"none", "selective", "full"}));
  if (coin()) degrees += fmt::format("  sequence_parallel: {}\n", subset({"true", "false"}));
  std::string text = degrees.empty() ? "" : "degrees:\n" + degrees;
  if (coin()) text += fmt::format("schedule:\n  micro_batch_size: {}\n", subset({"1", "2", "4"}));
  if (coin()) text += fmt::format("replicate: {}\n", subset({"layers.*.ln1", "layers.0.mlp", "layers.*.attn.out"}));
  if (coin()) {
    text += "partition:\n";
    text += fmt::format("  - ops: layers.*.mlp.{}\n    dims: {}\n", coin() ? "fc1" : "fc2", subset({"o", "i", "replicate"}));
    if (coin()) text += fmt::format("    degrees: {}\n", subset({"2", "4"}));
  }
  if (coin()) text += fmt::format("placement:\n  layers.0: stage 0\n  layers.3: stage {}\n", rng() % 2);
  return text;
}

TEST(ConstraintCheckerProperty, RandomSubsetsAgreeWithThePlansThePolicyMakes) {
  std::mt19937 rng(15);
  const api::Job& job = loaded_job();
  auto facts = api::space_facts(job);
  ASSERT_TRUE(facts);
  const std::vector<Candidate> space = enumerate_space(*facts);
  int kept_plans = 0, refused_plans = 0, plans_breaking_op_entries = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const std::string text = random_constraints(rng);
    SCOPED_TRACE(text);
    auto c = parse(text);
    ASSERT_TRUE(c) << c.error().to_string();
    auto checker = ConstraintChecker::bind(*c, job.graph, job.catalog, 4);
    if (!checker) continue;  // infeasible whatever the configuration (tested above)
    auto kept = checker->restrict(space, "auto's space", exec::Offload::none);
    if (!kept) continue;
    for (const Candidate& k : *kept) {  // the kept satisfy every degree entry
      EXPECT_TRUE(c->tp.allows(k.config.tp) && c->pp.allows(k.config.pp) && c->zero.allows(k.config.zero) &&
                  c->micro_batch_size.allows(k.micro_batch_size))
          << describe(k);
    }
    // A few candidates planned by their policy: a kept one's plan keeps every op entry, a refused one's
    // (refused for an op entry) breaks the one the checker named.
    for (int sample = 0; sample < 3; ++sample) {
      const Candidate& k = space[rng() % space.size()];
      const std::vector<Violation> predicted = checker->violations({k.config, k.micro_batch_size});
      auto plan = plan::make_plan(job.graph, job.catalog);
      ASSERT_TRUE(plan);
      if (!policy::apply_policy(*plan, k.policy, k.config, job.catalog)) continue;
      const std::vector<Violation> found = plan_violations(*c, *plan, k.config);
      plans_breaking_op_entries += found.empty() ? 0 : 1;
      for (const Violation& v : found) {
        EXPECT_TRUE(std::ranges::any_of(predicted, [&](const Violation& p) { return p.entry == v.entry; }))
            << describe(k) << ": the plan breaks " << to_string(v.entry) << " (" << v.reason << "), not predicted";
      }
      for (const Violation& p : predicted)
        if (p.entry.path.starts_with("partition") || p.entry.path.starts_with("replicate") ||
            p.entry.path.starts_with("placement.layers")) {
          EXPECT_TRUE(std::ranges::any_of(found, [&](const Violation& v) { return v.entry == p.entry; }))
              << describe(k) << ": predicted " << to_string(p.entry) << " (" << p.reason << "), the plan keeps it";
        }
      (predicted.empty() ? kept_plans : refused_plans)++;
    }
  }
  EXPECT_GT(kept_plans, 10);
  EXPECT_GT(refused_plans, 10);
  EXPECT_GT(plans_breaking_op_entries, 10);  // the plan reading sees the op entries broken, not only degrees
}

// The whole search on random subsets: its winner keeps every entry, by the checker and by its plan.
TEST(ConstraintCheckerProperty, AutoOnRandomSubsetsNeverBreaksThem) {
  std::mt19937 rng(21);
  const api::Job& job = loaded_job();
  int searched = 0;
  for (int trial = 0; trial < 40 && searched < 8; ++trial) {
    const std::string text = random_constraints(rng);
    SCOPED_TRACE(text);
    auto c = parse(text);
    ASSERT_TRUE(c);
    auto checker = ConstraintChecker::bind(*c, job.graph, job.catalog, 4);
    if (!checker) continue;
    auto result = search_with(text);
    if (!result) {  // only an infeasible file may fail, and then the checker says so too
      auto facts = api::space_facts(job);
      ASSERT_TRUE(facts);
      EXPECT_FALSE(checker->restrict(enumerate_space(*facts), "auto's space", exec::Offload::none))
          << result.error().to_string();
      continue;
    }
    ++searched;
    const api::Job& best = *result->best;
    const policy::ParallelConfig& config = best.request.config;
    const std::int64_t mbs = 16 / (std::int64_t{config.dp} * config.micro_batches);
    for (const Violation& v : checker->violations({config, mbs})) ADD_FAILURE() << to_string(v.entry) << ": " << v.reason;
    ASSERT_FALSE(best.folded);
    for (const Violation& v : plan_violations(*c, best.plan, config))
      ADD_FAILURE() << best.description << " breaks " << to_string(v.entry) << ": " << v.reason;
  }
  EXPECT_GE(searched, 5);
}

}  // namespace
}  // namespace loom::search
