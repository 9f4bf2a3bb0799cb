#include "loom/policy/policy.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace loom::policy {
namespace {

constexpr std::array<PolicyInfo, 8> kPolicies = {{
    {"dp", "dp", "data parallelism: the batch split dp ways, optimizer steps replicated"},
    {"tp", "tp, sequence_parallel", "Megatron tensor parallelism: column/row-parallel pairs, heads and experts split"},
    {"dp-tp", "dp, tp, sequence_parallel", "data parallelism, then tensor parallelism inside each data-parallel part"},
    {"pp", "pp, micro_batches, schedule, virtual_stages",
     "pipeline stages of balanced FLOPs with a GPipe or 1F1B schedule (interleaved: chunks of whole layers)"},
    {"megatron", "dp, tp, pp, micro_batches, schedule, virtual_stages, sequence_parallel, zero",
     "any dp x tp x pp (Megatron-LM's 3-D parallelism)"},
    {"coshard", "dp, tp, pp, micro_batches, schedule, virtual_stages, sequence_parallel, zero, coshard",
     "megatron with coshard (nnScaler): tp regions split C per device, run one after another, recomputed "
     "(default C 4 on the first quarter of the layers)"},
    {"interlaced", "dp, tp, pp, micro_batches",
     "nnScaler's interlaced pipeline (T5, mBART): the embedding and tied LM head split over all pp x tp devices, "
     "interleaved with the 1F1B stages"},
    {"zero", "dp, micro_batches, zero",
     "ZeRO data parallelism: optimizer states (stage 1), gradients (2) and parameters (3) partitioned over dp"},
}};

// The degrees a policy may set above 1.
struct Uses {
  bool dp = false, tp = false, pp = false;
};

Uses uses(std::string_view policy) {
  if (policy == "dp") return {.dp = true};
  if (policy == "tp") return {.tp = true};
  if (policy == "dp-tp") return {.dp = true, .tp = true};
  if (policy == "pp") return {.pp = true};
  if (policy == "zero") return {.dp = true};
  return {.dp = true, .tp = true, .pp = true};
}

}  // namespace

int device_count(const ParallelConfig& config) { return config.dp * config.tp * config.pp; }

int device_of(const ParallelConfig& config, int pp_rank, int dp_rank, int tp_rank) {
  return (pp_rank * config.dp + dp_rank) * config.tp + tp_rank;
}

Expected<ParallelConfig> default_degrees(std::string_view policy, int devices) {
  if (devices < 1) return fail(fmt::format("{} devices: a plan needs at least 1", devices));
  ParallelConfig config;
  if (policy == "tp") config.tp = devices;
  else if (policy == "pp") config.pp = devices;
  else if (policy == "dp-tp") {
    if (devices < 4 || devices % 2 != 0)
      return fail(fmt::format("policy dp-tp needs an even device count of at least 4, got {}", devices),
                  "use 4 devices (dp 2 x tp 2), or give the dp and tp degrees");
    config.tp = 2;
    config.dp = devices / 2;
  } else if (policy == "megatron" || policy == "coshard") {
    config.tp = std::min(devices, 8);
    while (devices % config.tp != 0) --config.tp;
    config.dp = devices / config.tp;
  } else if (policy == "interlaced") {
    config.pp = std::min(devices, 4);
    while (devices % config.pp != 0) --config.pp;
    config.tp = devices / config.pp;
  } else config.dp = devices;
  return config;
}

std::span<const PolicyInfo> known_policies() { return kPolicies; }

std::string known_policy_names() {
  std::string names;
  for (const PolicyInfo& p : kPolicies) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

Expected<void> apply_policy(plan::Plan& plan, std::string_view policy, const ParallelConfig& config,
                            const ir::OpCatalog& catalog, PolicyNotes* notes) {
  bool known = false;
  for (const PolicyInfo& p : kPolicies) known |= p.name == policy;
  if (!known)
    return fail(fmt::format("unknown policy '{}'", policy), fmt::format("known policies: {}", known_policy_names()));
  const Uses u = uses(policy);
  for (const auto& [degree, value, used] : {std::tuple{"dp", config.dp, u.dp}, std::tuple{"tp", config.tp, u.tp},
                                            std::tuple{"pp", config.pp, u.pp},
                                            std::tuple{"virtual_stages", config.virtual_stages, u.pp}}) {
    if (value < 1) return fail(fmt::format("policy '{}': {} is {}; degrees must be at least 1", policy, degree, value));
    if (value > 1 && !used)
      return fail(fmt::format("policy '{}' does not use {} (given {})", policy, degree, value),
                  "'megatron' combines dp, tp and pp");
  }
  if (config.zero < 0 || config.zero > 3)
    return fail(fmt::format("policy '{}': ZeRO stage {} does not exist", policy, config.zero),
                "use stage 1, 2 or 3 (0 turns ZeRO off)");
  if (config.zero > 0 && policy != "zero" && policy != "megatron")
    return fail(fmt::format("policy '{}' does not use ZeRO (given stage {})", policy, config.zero),
                "'zero' is data parallelism with ZeRO; 'megatron' takes ZeRO over its dp ranks");
  if (policy == "zero" && config.zero == 0)
    return fail("policy 'zero' needs a ZeRO stage", "set the stage to 1, 2 or 3 (`--zero N`)");
  if (config.sequence_parallel && !u.tp)
    return fail(fmt::format("policy '{}' does not use tensor parallelism, which sequence parallelism needs", policy),
                "use 'tp', 'dp-tp' or 'megatron' with tp > 1");
  if ((config.coshard.parts > 1 || config.coshard.layers) && policy != "megatron" && policy != "coshard")
    return fail(fmt::format("policy '{}' does not use coshard", policy),
                "'megatron' takes coshard (--coshard C), and 'coshard' is megatron with it on");
  ParallelConfig applied = config;
  if (policy == "coshard") {
    applied.coshard = applied_coshard(plan, policy, config.coshard);
    if (applied.coshard.parts < 2)
      return fail(fmt::format("policy 'coshard' with {} part per device is megatron", applied.coshard.parts),
                  "give 2 or more parts per device (--coshard C), or use the policy 'megatron'");
  }
  if (policy == "interlaced") applied.interlaced = true;
  if (applied.overlap == Overlap::oases) {
    // Oases chains every sub-op of its sub-batch pairs: each block already runs after the whole one before.
    if (applied.block_order != plan::BlockOrder::strict)
      return fail(fmt::format("policy '{}': --overlap oases orders whole blocks; the {} block order does not apply",
                              policy, plan::name(applied.block_order)),
                  "drop --block-order, or --overlap");
    return with_context(oases_megatron(plan, applied, catalog), fmt::format("policy '{}'", policy));
  }
  return with_context(megatron(plan, applied, catalog, notes), fmt::format("policy '{}'", policy));
}

}  // namespace loom::policy
