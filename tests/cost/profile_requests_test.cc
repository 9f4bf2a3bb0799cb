// profile_requests on hand-built and policy plans: one request per distinct missing key, backward keys
// described by their forward part, keys in the database skipped (and then priced by the measurement),
// deterministic order and text; the results file parser and the device-name matching.
#include "loom/cost/profile_requests.h"

#include <gtest/gtest.h>

#include "cost_test_support.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "testing/policy_plans.h"
#include "loom/ir/graph_builder.h"
#include "loom/ops/registry.h"

namespace loom::cost {
namespace {

using testing::with_backward;
using testing::test_gpu;

// y = x @ w, z = y + y (y read twice: its gradient is accumulated), loss = mean(z); with the backward.
const ir::Graph& tiny_graph() {
  static const ir::Graph g = [] {
    ir::GraphBuilder b("requests_tiny", ops::builtin_ops());
    const ir::TensorId x = b.input("x", ir::Shape{8, 16}, ir::DType::bf16);
    const ir::TensorId w = b.parameter("w", ir::Shape{16, 4}, ir::DType::bf16);
    const ir::TensorId y = b.op("matmul", "mm", {x, w});
    const ir::TensorId z = b.op("add", "twice", {y, y});
    b.set_loss(b.op("mean", "loss", {z}));
    return with_backward(std::move(b));
  }();
  return g;
}

plan::Plan plan_of(const ir::Graph& graph) {
  auto p = plan::make_plan(graph, ops::builtin_ops());
  EXPECT_TRUE(p) << p.error().to_string();
  return std::move(*p);
}

// The shrunk GPT-3 125M training graph (AdamW) under Megatron tensor parallelism.
plan::Plan gpt_plan(int tp) {
  plan::Plan p = plan_of(exec::testing::shrunk_training_graph("gpt3-125m", ir::DType::bf16));
  auto applied = policy::apply_policy(p, "megatron", {.tp = tp});
  EXPECT_TRUE(applied) << applied.error().to_string();
  return p;
}

ComputeModel model_of(const plan::Plan& p, const ProfileDb* db) {
  auto m = ComputeModel::make(p, ops::builtin_ops(), test_gpu(), db);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

const ProfileRequest* find_request(const ProfileRequests& r, std::string_view op) {
  for (const ProfileRequest& request : r.requests)
    if (request.key.op == op) return &request;
  return nullptr;
}

TEST(ProfileRequests, OneRequestPerDistinctKeyInKeyOrder) {
  const plan::Plan p = gpt_plan(2);
  const ProfileDb empty;
  const ComputeModel model = model_of(p, &empty);
  const ProfileRequests r = profile_requests(p, model);
  EXPECT_EQ(r.present, 0u);
  EXPECT_TRUE(r.unresolved.empty());
  ASSERT_FALSE(r.requests.empty());
  std::set<ProfileKey> keys;
  std::size_t sub_ops = 0;
  for (const ProfileRequest& request : r.requests) {
    EXPECT_TRUE(keys.insert(request.key).second) << "repeated " << request.key.to_string();
    EXPECT_EQ(request.key.device, "test-gpu");
    EXPECT_GE(request.sub_ops, 1u);
    sub_ops += request.sub_ops;
  }
  EXPECT_TRUE(std::is_sorted(r.requests.begin(), r.requests.end(),
                             [](const auto& a, const auto& b) { return a.key < b.key; }));
  // Every live sub-op is covered by exactly one request: tensor-parallel peers share keys.
  EXPECT_EQ(sub_ops, p.live_sub_ops().size());
  EXPECT_EQ(r.live_sub_ops, p.live_sub_ops().size());
  EXPECT_LT(r.requests.size(), p.live_sub_ops().size() / 2);
  for (plan::SubOpId id : p.live_sub_ops()) EXPECT_TRUE(keys.contains(model.profile_key(id)));
}

TEST(ProfileRequests, ForwardRequestCarriesTheInstance) {
  const plan::Plan p = plan_of(tiny_graph());
  const ComputeModel model = model_of(p, nullptr);
  const ProfileRequests r = profile_requests(p, model);
  const ProfileRequest* mm = find_request(r, "matmul");
  ASSERT_NE(mm, nullptr);
  EXPECT_FALSE(mm->backward);
  EXPECT_EQ(mm->op_type, "matmul");
  EXPECT_EQ(mm->key.shapes, (std::vector<ir::Shape>{ir::Shape{8, 16}, ir::Shape{16, 4}}));
  EXPECT_EQ(mm->key.dtype, ir::DType::bf16);
  EXPECT_EQ(mm->inputs, (std::vector<TensorSpec>{{ir::Shape{8, 16}, ir::DType::bf16}, {ir::Shape{16, 4}, ir::DType::bf16}}));
  EXPECT_EQ(mm->outputs, (std::vector<TensorSpec>{{ir::Shape{8, 4}, ir::DType::bf16}}));
  EXPECT_EQ(mm->example, "mm");
  EXPECT_EQ(mm->sub_ops, 1u);
  // The gradient of y is summed from its two reads: a forward-style op of the backward pass.
  const ProfileRequest* acc = find_request(r, "accumulate");
  ASSERT_NE(acc, nullptr);
  EXPECT_FALSE(acc->backward);
}

TEST(ProfileRequests, BackwardKeyIsTimedThroughItsForwardPart) {
  const plan::Plan p = plan_of(tiny_graph());
  const ProfileRequests r = profile_requests(p, model_of(p, nullptr));
  const ProfileRequest* mm = find_request(r, "matmul/backward");
  ASSERT_NE(mm, nullptr);
  EXPECT_TRUE(mm->backward);
  EXPECT_EQ(mm->op_type, "matmul");
  // The key holds what the backward op reads (x, w, dy); the request the forward instance to replay.
  EXPECT_EQ(mm->key.shapes, (std::vector<ir::Shape>{ir::Shape{8, 16}, ir::Shape{16, 4}, ir::Shape{8, 4}}));
  EXPECT_EQ(mm->inputs.size(), 2u);
  EXPECT_EQ(mm->inputs[0].shape, (ir::Shape{8, 16}));
  EXPECT_EQ(mm->outputs[0].shape, (ir::Shape{8, 4}));
  EXPECT_EQ(mm->grad_inputs, (std::vector<std::int64_t>{1}));  // x is an input: only w gets a gradient
  EXPECT_EQ(mm->grad_outputs, (std::vector<std::int64_t>{0}));
}

TEST(ProfileRequests, SplitsShrinkTheShapes) {
  // Under tp 2 the first MLP matmul is column-parallel: its weight is halved along the output features.
  const plan::Plan whole = gpt_plan(1), split = gpt_plan(2);
  const auto fc1_weight = [](const ProfileRequests& r) {
    for (const ProfileRequest& request : r.requests)
      if (request.op_type == "linear" && request.example.find("mlp.fc1") != std::string::npos && !request.backward)
        return request.inputs.at(1).shape;
    return ir::Shape{};
  };
  const ir::Shape w1 = fc1_weight(profile_requests(whole, model_of(whole, nullptr)));
  const ir::Shape w2 = fc1_weight(profile_requests(split, model_of(split, nullptr)));
  ASSERT_EQ(w1.rank(), 2u);
  EXPECT_EQ(w2, (ir::Shape{w1[0] / 2, w1[1]}));
}

TEST(ProfileRequests, KeysInTheDatabaseAreSkippedAndPriceTheirSubOps) {
  const plan::Plan p = gpt_plan(2);
  const ProfileRequests all = profile_requests(p, model_of(p, nullptr));
  ProfileDb db;
  for (std::size_t i = 0; i < all.requests.size(); i += 2) db.set(all.requests[i].key, 1e-3 * static_cast<double>(i + 1));
  const ComputeModel model = model_of(p, &db);
  const ProfileRequests rest = profile_requests(p, model);
  EXPECT_EQ(rest.present, db.size());
  EXPECT_EQ(rest.requests.size(), all.requests.size() - db.size());
  for (const ProfileRequest& request : rest.requests) EXPECT_FALSE(db.find(request.key)) << request.key.to_string();
  // A measured key overrides the roofline for every sub-op that has it.
  for (plan::SubOpId id : p.live_sub_ops()) {
    const std::optional<double> measured = db.find(model.profile_key(id));
    const ComputeEstimate e = model.estimate(id);
    EXPECT_EQ(e.measured, measured.has_value());
    if (measured) {
      EXPECT_DOUBLE_EQ(e.seconds, *measured);
    }
  }
  // All measured: nothing left to ask.
  for (const ProfileRequest& request : rest.requests) db.set(request.key, 1e-6);
  const ProfileRequests none = profile_requests(p, model_of(p, &db));
  EXPECT_TRUE(none.requests.empty());
  EXPECT_EQ(none.present, all.requests.size());
}

TEST(ProfileRequests, SameKeyDifferentInstancesAreCountedAsVariants) {
  // The embedding sum broadcasts ([b s h] + [s h]), the residual adds do not; their backward ops read
  // only the output gradient, so all share one key.
  const plan::Plan p = gpt_plan(1);
  const ProfileRequests r = profile_requests(p, model_of(p, nullptr));
  const ProfileRequest* add = find_request(r, "add/backward");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->variants, 2u);
  EXPECT_GT(add->sub_ops, 2u);
  const ProfileRequest* mm = find_request(r, "linear");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->variants, 1u);
}

TEST(ProfileRequests, BackwardPartWithoutForwardPartIsUnresolved) {
  plan::Plan p = plan_of(tiny_graph());
  plan::SubOpId backward;
  for (plan::SubOpId id : p.live_sub_ops())
    if (p.op_of(id).is_mirror() && p.op_of(id).type == "matmul") backward = id;
  ASSERT_TRUE(backward.valid());
  p.sub_op(backward).mirror = plan::SubOpId{};
  const ProfileRequests r = profile_requests(p, model_of(p, nullptr));
  EXPECT_EQ(find_request(r, "matmul/backward"), nullptr);
  ASSERT_EQ(r.unresolved.size(), 1u);
  EXPECT_EQ(r.unresolved[0].key.op, "matmul/backward");
  EXPECT_NE(r.unresolved[0].reason.find("no forward part"), std::string::npos);
  EXPECT_NE(find_request(r, "matmul"), nullptr);
}

TEST(ProfileRequests, DeterministicText) {
  const plan::Plan a = gpt_plan(2), b = gpt_plan(2);
  const ProfileRequests ra = profile_requests(a, model_of(a, nullptr));
  const ProfileRequests rb = profile_requests(b, model_of(b, nullptr));
  EXPECT_EQ(ra.requests, rb.requests);
  EXPECT_EQ(requests_to_json(ra.requests, "test-gpu"), requests_to_json(rb.requests, "test-gpu"));
}

TEST(ProfileRequests, RequestFileHoldsWhatATimerNeeds) {
  const plan::Plan p = gpt_plan(2);
  const ProfileRequests r = profile_requests(p, model_of(p, nullptr));
  const auto doc = nlohmann::json::parse(requests_to_json(r.requests, "test-gpu", {{"repeats", 3}}));
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["device"], "test-gpu");
  EXPECT_EQ(doc["timing"]["repeats"], 3);
  ASSERT_EQ(doc["requests"].size(), r.requests.size());
  for (std::size_t i = 0; i < r.requests.size(); ++i) {
    const auto& j = doc["requests"][i];
    const ProfileRequest& request = r.requests[i];
    EXPECT_EQ(j["key"]["op"], request.key.op);
    EXPECT_EQ(j["key"]["shapes"].size(), request.key.shapes.size());
    EXPECT_EQ(j["op_type"], request.op_type);
    EXPECT_EQ(j["pass"], request.backward ? "backward" : "forward");
    EXPECT_EQ(j["inputs"].size(), request.inputs.size());
    EXPECT_EQ(j.contains("grad_inputs"), request.backward);
    EXPECT_EQ(j["attrs"].size(), request.attrs.size());
  }
  // Attribute kinds survive: the reshape's target shape is a list, dropout's p a real number.
  for (const auto& j : doc["requests"]) {
    if (j["op_type"] == "dropout") {
      EXPECT_TRUE(j["attrs"]["p"].is_number_float());
    }
    if (j["op_type"] == "reshape") {
      EXPECT_TRUE(j["attrs"]["shape"].is_array());
    }
  }
}

TEST(TimerResults, ParsesMeasurementsAndUnsupportedKeys) {
  const std::string text = R"({"version": 1, "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"},
    "torch": "2.11.0", "results": [{"key": {"op": "matmul", "shapes": [[8, 16], [16, 4]], "dtype": "bf16"},
    "seconds": 2.5e-6, "method": "cuda-graph"}],
    "unsupported": [{"key": {"op": "moe_gate", "shapes": [[4, 8]], "dtype": "bfloat16"}, "reason": "no torch form"}]})";
  auto r = parse_timer_results(text, "res.json", "H100-SXM-80GB");
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->device_type, "cuda");
  EXPECT_EQ(r->device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r->torch_version, "2.11.0");
  ASSERT_EQ(r->measured.size(), 1u);
  EXPECT_EQ(r->measured[0].first, (ProfileKey{"matmul", {ir::Shape{8, 16}, ir::Shape{16, 4}}, ir::DType::bf16, "H100-SXM-80GB"}));
  EXPECT_DOUBLE_EQ(r->measured[0].second, 2.5e-6);
  ASSERT_EQ(r->unsupported.size(), 1u);
  EXPECT_EQ(r->unsupported[0].first.dtype, ir::DType::bf16);
  EXPECT_EQ(r->unsupported[0].second, "no torch form");
}

TEST(TimerResults, ErrorsNameTheFileAndEntry) {
  const auto error_of = [](const std::string& text) {
    auto r = parse_timer_results(text, "res.json", "gpu");
    return r ? std::string("(parsed)") : r.error().message;
  };
  EXPECT_NE(error_of("{").find("res.json: line 1 column 2: malformed JSON: "), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1})").find("not a timer results file"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 2, "results": []})").find("unsupported results version 2"), std::string::npos);
  const std::string key = R"({"op": "add", "shapes": [[2]], "dtype": "f32"})";
  EXPECT_NE(error_of(R"({"version": 1, "results": [{"key": )" + key + R"(, "seconds": -1}]})")
                .find("results[0]: \"seconds\" must be positive"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "results": [{"key": )" + key + "}]}").find("\"seconds\" must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "results": [{"seconds": 1}]})").find("results[0]"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "results": [{"key": {"op": "add", "shapes": [[-2]], "dtype": "f32"}, "seconds": 1}]})")
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version": 1, "results": [{"key": {"op": "add", "shapes": [], "dtype": "f13"}, "seconds": 1}]})")
                .find("results[0]"),
            std::string::npos);
}

// A field of the wrong JSON type made json's value() throw out of the reader (found by hand while writing
// fuzz/timer_results_fuzz.cc), and a number beyond double made its parser throw out_of_range (found by the
// fuzzer): `loom profile --results` aborted, exit 134.
TEST(TimerResults, AStringFieldOfAnotherTypeIsAnErrorNamingIt) {
  const auto error_of = [](const std::string& text) {
    auto r = parse_timer_results(text, "res.json", "gpu");
    return r ? std::string("(parsed)") : r.error().message;
  };
  EXPECT_EQ(error_of(R"({"version": 1, "device": {"type": 5}, "results": []})"),
            "res.json: device: \"type\" must be a string, got 5");
  EXPECT_EQ(error_of(R"({"version": 1, "device": {"type": "cpu", "name": [1]}, "results": []})"),
            "res.json: device: \"name\" must be a string, got [1]");
  EXPECT_EQ(error_of(R"({"version": 1, "results": [], "unsupported": [{"key": {"op": "matmul", "shapes": [],
                       "dtype": "f32"}, "reason": 3}]})"),
            "res.json: unsupported[0]: \"reason\" must be a string, got 3");
  // and a number beyond double, which json reports as out_of_range, not parse_error
  EXPECT_EQ(error_of(R"({"version": 1e400, "results": []})"), "res.json: malformed JSON: number overflow parsing '1e400'");
  auto no_reason = parse_timer_results(
      R"({"version": 1, "results": [], "unsupported": [{"key": {"op": "matmul", "shapes": [], "dtype": "f32"}}]})",
      "res.json", "gpu");
  ASSERT_TRUE(no_reason) << no_reason.error().to_string();
  EXPECT_EQ(no_reason->unsupported.at(0).second, "no reason given");
}

TEST(MergeResults, StoresWhatWasAskedAndAccountsForTheRest) {
  const plan::Plan p = plan_of(tiny_graph());
  const ProfileRequests wanted = profile_requests(p, model_of(p, nullptr));
  ASSERT_GE(wanted.requests.size(), 3u);
  const ProfileKey& first = wanted.requests[0].key;
  const ProfileKey& second = wanted.requests[1].key;
  const ProfileKey stranger{.op = "conv2d", .shapes = {ir::Shape{1}}, .device = "test-gpu"};
  TimerResults results;
  results.measured = {{first, 2e-6}, {first, 9e-6}, {stranger, 1e-6}};
  results.unsupported = {{second, "no torch form"}, {stranger, "not asked"}};
  ProfileDb db;
  const MergeSummary merged = merge_results(db, wanted, results);
  EXPECT_EQ(merged.measured, 1u);
  EXPECT_EQ(db.size(), 1u);
  EXPECT_EQ(db.find(first), 2e-6);  // the first report of a key wins
  EXPECT_EQ(merged.ignored, 2u);   // the repeat and the key nobody asked for
  ASSERT_EQ(merged.skipped.size(), 1u);
  EXPECT_EQ(merged.skipped[0], (std::pair<ProfileKey, std::string>{second, "no torch form"}));
  EXPECT_EQ(merged.missing, wanted.requests.size() - 2);
}

TEST(ProfileDeviceName, MatchesTorchNamesToKnownGpus) {
  const std::vector<cluster::GpuSpec> known = {{.name = "V100-32GB"}, {.name = "A100-SXM-80GB"},
                                               {.name = "H100-SXM-80GB"}, {.name = "RTX3090"}};
  EXPECT_EQ(profile_device_name("NVIDIA H100 80GB HBM3", known), "H100-SXM-80GB");
  EXPECT_EQ(profile_device_name("NVIDIA A100-SXM4-80GB", known), "A100-SXM-80GB");
  EXPECT_EQ(profile_device_name("Tesla V100-SXM2-32GB", known), "V100-32GB");
  EXPECT_EQ(profile_device_name("NVIDIA GeForce RTX 3090", known), "RTX3090");
  EXPECT_EQ(profile_device_name("cpu", known), "cpu");
  EXPECT_EQ(profile_device_name("NVIDIA H200", known), "NVIDIA H200");
  EXPECT_EQ(profile_device_name("NVIDIA H100 80GB HBM3", {}), "NVIDIA H100 80GB HBM3");
}

}  // namespace
}  // namespace loom::cost
