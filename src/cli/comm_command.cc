// `loom comm`: searches the communication that turns a producer's RVD layout into a consumer's
// (SuperScaler §4) and prints the primitives, bytes per link tier, predicted time and the p2p baseline.
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "loom/cluster/presets.h"
#include "loom/comm/search.h"
#include "loom/core/strings.h"

namespace loom::cli {
namespace {

struct CommArgs {
  std::string shape;
  std::string from;
  std::string to;
  std::string cluster = "v100x8x2";
  std::string dtype = "f32";
  bool json = false;
  std::int64_t max_states = comm::SearchOptions{}.max_states;
};

Expected<ir::Shape> parse_shape(std::string_view text) {
  ir::Shape shape;
  for (const std::string& item : split(text, ',')) {
    const std::string_view t = trim(item);
    std::int64_t size = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), size);
    if (t.empty() || ec != std::errc{} || end != t.data() + t.size() || size < 1)
      return fail(fmt::format("option --shape: bad dimension '{}' in '{}'", t, text),
                  "give positive sizes separated by commas, e.g. --shape 1024,512");
    shape.dims.push_back(size);
  }
  // The same cap as graph JSON (ir::kMaxElements): element and byte counts are int64 products, and a
  // wrapped one printed "0 B / 0 us" for 4294967296,4294967296.
  if (!shape.within_limits())
    return fail(fmt::format("option --shape: {} has more than 2^48 elements, Loom's limit", text),
                "give a smaller tensor");
  return shape;
}

nlohmann::json tiers_json(const std::map<cluster::LinkKind, std::int64_t>& tiers) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [kind, bytes] : tiers) out[std::string(cluster::name(kind))] = bytes;
  return out;
}

nlohmann::json step_json(const comm::PlannedStep& s) {
  nlohmann::json j = {{"rule", s.step.rule},
                      {"primitive", std::string(comm::name(s.step.primitive))},
                      {"after", comm::to_string(s.after)},
                      {"groups", s.step.groups},
                      {"bytes_per_device", s.step.bytes_per_device},
                      {"time_s", s.time}};
  if (s.step.primitive == comm::Primitive::p2p) {
    nlohmann::json sends = nlohmann::json::array();
    for (const comm::Transfer& t : s.step.transfers) sends.push_back({t.src, t.dst, t.bytes});
    j["transfers"] = sends;  // [src, dst, bytes]
  }
  return j;
}

std::string tiers_text(const std::map<cluster::LinkKind, std::int64_t>& tiers) {
  std::vector<std::string> parts;
  for (const auto& [kind, bytes] : tiers)
    parts.push_back(fmt::format("{} {}", cluster::name(kind), human_bytes(static_cast<double>(bytes))));
  return parts.empty() ? "none" : join(parts, ", ");
}

std::string seconds_text(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} us", s * 1e6);
}

int run_comm(const CommArgs& args) {
  Expected<ir::Shape> shape = parse_shape(args.shape);
  if (!shape) return report(shape.error());
  Expected<ir::DType> dtype = with_context(ir::parse_dtype(args.dtype), "option --dtype");
  if (!dtype) return report(dtype.error());
  Expected<comm::Layout> from = with_context(comm::parse_layout(args.from), "option --from");
  if (!from) return report(from.error());
  Expected<comm::Layout> to = with_context(comm::parse_layout(args.to), "option --to");
  if (!to) return report(to.error());
  Expected<cluster::Cluster> cluster = with_context(cluster::make_cluster(args.cluster), "option --cluster");
  if (!cluster) return report(cluster.error());

  const comm::TransitionRequest request{{*shape, *dtype}, *from, *to};
  const comm::AlphaBetaCostModel model(*cluster);
  const comm::SearchOptions options{.max_states = args.max_states};
  Expected<comm::TransitionPlan> plan = comm::search_transition(request, *cluster, model, options);
  if (!plan) return report(plan.error());

  const double speedup = plan->time > 0 ? plan->baseline_time / plan->time : 1.0;
  if (args.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const comm::PlannedStep& s : plan->steps) steps.push_back(step_json(s));
    const nlohmann::json out = {{"shape", shape->dims},
                                {"dtype", std::string(ir::name(*dtype))},
                                {"from", comm::to_string(*from)},
                                {"to", comm::to_string(*to)},
                                {"cluster", cluster->name},
                                {"steps", steps},
                                {"time_s", plan->time},
                                {"bytes_per_tier", tiers_json(plan->bytes_per_tier)},
                                {"p2p_baseline_time_s", plan->baseline_time},
                                {"p2p_baseline_bytes_per_tier", tiers_json(comm::bytes_per_tier(plan->baseline.step, *cluster))},
                                {"speedup_over_p2p", speedup},
                                {"states_explored", plan->states_explored},
                                {"stopped_early", plan->stopped_early}};
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("{}{}  {} -> {}  on {}\n", ir::name(*dtype), shape->to_string(), comm::to_string(*from),
             comm::to_string(*to), cluster->name);
  if (plan->steps.empty()) fmt::print("  (already in place: no communication)\n");
  for (std::size_t i = 0; i < plan->steps.size(); ++i) {
    const comm::PlannedStep& s = plan->steps[i];
    fmt::print("  {}. {}\n     -> {}  {}\n", i + 1, comm::describe(s.step), comm::to_string(s.after), seconds_text(s.time));
  }
  fmt::print("bytes per link tier  {}\n", tiers_text(plan->bytes_per_tier));
  fmt::print("predicted time       {}\n", seconds_text(plan->time));
  fmt::print("p2p baseline         {} ({}; {:.2f}x the searched plan)\n", seconds_text(plan->baseline_time),
             tiers_text(comm::bytes_per_tier(plan->baseline.step, *cluster)), speedup);
  if (plan->stopped_early)
    fmt::print("note: the search stopped early after {} states (budget --max-states {}); the plan above is "
               "the best found within the budget\n",
               plan->states_explored, options.max_states);
  return 0;
}

}  // namespace

void add_comm_command(CLI::App& app) {
  auto args = std::make_shared<CommArgs>();
  CLI::App* cmd = app.add_subcommand("comm", "Search the communication between two RVD layouts of a tensor");
  cmd->add_option("--shape", args->shape, "Tensor shape, sizes separated by commas (e.g. 1024,512)")->required();
  cmd->add_option("--from", args->from, "Producer layout, e.g. \"R(1)V(8)D(1)@0-7\"")->required();
  cmd->add_option("--to", args->to, "Consumer layout, e.g. \"R(1)V(1)D(8)@8-15\"")->required();
  cmd->add_option("--cluster", args->cluster, "Cluster preset, optionally with nodes: <preset>x<nodes>")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "Element type: f32, bf16, f16, ...")->capture_default_str();
  cmd->add_option("--max-states", args->max_states,
                  "Search budget in states (a state on more than 16 devices counts more); past it, plain p2p")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "Print the result as JSON");
  on_selected(cmd, [args] { return run_comm(*args); });
}

}  // namespace loom::cli
