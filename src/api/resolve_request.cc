#include "loom/api/resolve_request.h"

#include <algorithm>

#include <fmt/format.h>

#include "loom/api/baseline_search.h"
#include "loom/core/suggest.h"
#include "loom/frontend/model_file.h"
#include "loom/policy/layer_degrees.h"

namespace loom::api {
namespace {

bool policy_has_dp(std::string_view policy) {
  for (const policy::PolicyInfo& p : policy::known_policies())
    if (p.name == policy) return p.degrees.find("dp") != std::string_view::npos;
  return false;
}

std::string degrees_text(const policy::ParallelConfig& c) { return fmt::format("dp {} x tp {} x pp {}", c.dp, c.tp, c.pp); }

Expected<policy::ParallelConfig> resolve_degrees(const JobOptions& o, int gpus) {
  if (o.dp == 0 && o.tp == 0 && o.pp == 0)
    return with_context(policy::default_degrees(o.policy, gpus), fmt::format("policy {} on {} GPUs", o.policy, gpus));
  policy::ParallelConfig c;
  c.tp = std::max(o.tp, 1);
  c.pp = std::max(o.pp, 1);
  if (o.dp > 0) {
    c.dp = o.dp;
  } else if (policy_has_dp(o.policy)) {
    if (gpus % (c.tp * c.pp) != 0)
      return fail(fmt::format("{} GPUs do not divide into tp {} x pp {} (dp = GPUs / (tp x pp))", gpus, c.tp, c.pp),
                  "give a GPU count (--gpus) that tp x pp divides, or other degrees");
    c.dp = gpus / (c.tp * c.pp);
  }
  const int used = policy::device_count(c);
  if (used != gpus)
    return fail(fmt::format("{} uses {} GPUs, but the job has {}{}", degrees_text(c), used, gpus,
                            used < gpus ? fmt::format(" ({} left unused)", gpus - used) : std::string()),
                used < gpus ? fmt::format("pass --gpus {} to plan on part of the cluster{}", used,
                                          policy_has_dp(o.policy) ? ", or leave --dp out to use them all" : "")
                            : fmt::format("give degrees whose product is {}, or --gpus {}", gpus, used));
  return c;
}

Expected<int> resolve_micro_batches(const JobOptions& o, const policy::ParallelConfig& c, std::int64_t global_batch) {
  if (o.micro_batch_size > 0) {
    const std::int64_t per_step = std::int64_t{c.dp} * o.micro_batch_size;
    if (global_batch <= 0 || global_batch % per_step != 0)
      return fail(fmt::format("the global batch {} does not divide into dp {} x micro-batch size {}", global_batch,
                              c.dp, o.micro_batch_size),
                  "choose --global-batch a multiple of dp x --micro-batch-size");
    const auto derived = static_cast<int>(global_batch / per_step);
    if (o.micro_batches > 0 && o.micro_batches != derived)
      return fail(fmt::format("--microbatches {} disagrees with --micro-batch-size {}: global batch {} / (dp {} x {}) "
                              "is {} micro-batches",
                              o.micro_batches, o.micro_batch_size, global_batch, c.dp, o.micro_batch_size, derived),
                  "give one of --microbatches and --micro-batch-size");
    return derived;
  }
  if (o.micro_batches > 0) return o.micro_batches;
  return c.pp > 1 ? 2 * c.pp : 1;
}

Expected<void> check_policy(std::string_view name) {
  if (is_search(name) || name == "oases") return {};
  const auto known = policy::known_policies();
  if (std::none_of(known.begin(), known.end(), [&](const policy::PolicyInfo& p) { return p.name == name; }))
    return fail(fmt::format("unknown policy '{}'", name),
                fmt::format("use one of {}, or a search: auto, megatron-best, deepspeed-best, oases",
                            policy::known_policy_names()));
  return {};
}

// ZeRO-Offload moves what ZeRO partitions: the optimizer's shards (stage >= 1), the parameters' (stage 3).
Expected<void> check_offload(const JobOptions& o) {
  if (o.offload == exec::Offload::none) return {};
  const std::string what = fmt::format("--offload {}", exec::name(o.offload));
  if (o.policy != "megatron" && o.policy != "zero")
    return fail(fmt::format("{} needs the policy megatron or zero, not {}", what, o.policy),
                "offload a ZeRO plan: --policy zero --zero 3 (or megatron with --zero)");
  if (o.offload == exec::Offload::optimizer_and_params && o.zero != 3)
    return fail(fmt::format("{} needs ZeRO-3 (parameters partitioned), not ZeRO-{}", what, o.zero),
                "add --zero 3, or offload only the optimizer (--offload optimizer)");
  if (o.zero < 1)
    return fail(fmt::format("{} needs ZeRO (stage 1 to 3): it offloads each rank's optimizer shard", what),
                "add --zero 1, 2 or 3");
  return {};
}

}  // namespace

bool plans_a_graph(const JobOptions& options) { return !options.graph_file.empty() || !options.graph_text.empty(); }

Expected<void> check_options(const JobOptions& o) {
  const int sources = !o.model.empty() + !o.model_file.empty() + !o.arch.family.empty() + !o.graph_file.empty() +
                      !o.graph_text.empty();
  if (sources != 1)
    return fail(fmt::format("{}: give exactly one of --model NAME, --model-file FILE, --arch FAMILY or --graph FILE "
                            "(in Python: model=, model_file=, arch=, graph= or graph_file=)",
                            sources == 0 ? "no model" : "several models"),
                "`loom models` lists the presets; docs/models.md describes model files and --arch");
  if (o.arch.family.empty())
    for (const models::SpecField field : models::spec_fields())
      if (models::given(o.arch, field))
        return fail(fmt::format("{} describes an architecture, but no --arch FAMILY is given", models::flag(field)),
                    "add --arch (gpt, llama, ...), or drop it to plan a preset or file at its own sizes");
  if (plans_a_graph(o) && (o.seq != 0 || o.layers != 0 || o.vocab != 0))
    return fail("--seq, --layers and --vocab resize a preset; a graph file keeps the sizes it was traced at (its batch "
                "alone resizes, by --global-batch)",
                "trace the model again with other example inputs");
  if (plans_a_graph(o) && o.attention != models::AttentionImpl::fused)
    return fail("--attention builds a preset's attention; a graph file keeps the ops it was traced with",
                "drop --attention, or plan a preset with --model");
  return check_policy(o.policy);
}

models::ModelSpec arch_spec_of(const JobOptions& o) {
  models::ModelSpec spec = o.arch;
  spec.layers = o.layers;
  spec.seq = o.seq;
  spec.vocab = o.vocab;
  spec.batch = o.global_batch;
  return spec;
}

Expected<models::ModelPreset> model_preset_of(const JobOptions& o) {
  if (!o.model_file.empty()) return frontend::load_model_file(o.model_file);
  if (!o.arch.family.empty())
    return with_context(models::preset_of(arch_spec_of(o), models::FieldNaming::flag),
                        fmt::format("--arch {}", o.arch.family));
  const models::ModelPreset* preset = models::find_preset(o.model);
  if (preset == nullptr) {
    std::vector<std::string> names;
    for (const models::ModelPreset& p : models::model_presets()) names.push_back(p.name);
    const std::string guess = did_you_mean(o.model, names);
    return fail(fmt::format("unknown model preset '{}'", o.model),
                guess.empty() ? "`loom models` lists the presets" : guess + "; `loom models` lists the presets");
  }
  return *preset;
}

Expected<ir::Graph> build_model_of(const JobOptions& o) {
  LOOM_ASSIGN_OR_RETURN(const models::ModelPreset preset, model_preset_of(o));
  return models::build_model(preset, model_options_of(o));
}

std::string model_label(const JobOptions& o) {
  if (!o.model.empty()) return o.model;
  if (!o.model_file.empty()) return o.model_file;
  if (!o.arch.family.empty()) return fmt::format("--arch {}", o.arch.family);
  return o.graph_file.empty() ? std::string("the graph JSON") : o.graph_file;
}

models::ModelOptions model_options_of(const JobOptions& o) {
  // --arch's depth, sequence, vocabulary and batch are in its spec; passing them again would resize nothing,
  // but a fixed-depth family (ResNet) refuses a depth override.
  const bool arch = !o.arch.family.empty();
  return models::ModelOptions{.batch = arch ? 0 : o.global_batch,
                              .seq = arch ? 0 : o.seq,
                              .dtype = o.dtype,
                              .layers = arch ? 0 : o.layers,
                              .shrink = o.shrink,
                              .vocab_multiple = o.vocab_multiple,
                              .vocab = arch ? 0 : o.vocab,
                              .attention = o.attention};
}

void size_to_degrees(JobOptions& o, bool gpus_given) {
  if (!gpus_given)
    o.gpus = (o.dp > 0 || o.tp > 0 || o.pp > 0) ? std::max(o.dp, 1) * std::max(o.tp, 1) * std::max(o.pp, 1) : 2;
  o.cluster = o.gpus <= 8 ? std::string("dgx-a100") : fmt::format("dgx-a100x{}", (o.gpus + 7) / 8);
}

JobOptions with_config(JobOptions o, const policy::ParallelConfig& c) {
  o.gpus = policy::device_count(c);
  o.dp = c.dp;
  o.tp = c.tp;
  o.pp = c.pp;
  o.micro_batches = c.micro_batches;
  o.micro_batch_size = 0;
  o.schedule = c.schedule;
  o.interleave = c.virtual_stages;
  o.block_order = c.block_order;
  o.sequence_parallel = c.sequence_parallel;
  o.zero = c.zero;
  o.recompute = c.recompute;
  o.coshard = c.coshard;
  o.overlap = c.overlap;
  o.tp_layers = c.layer_tp.empty() ? std::string() : policy::to_string(policy::runs_of(c.layer_tp));
  return o;
}

Expected<ResolvedRequest> resolve_request(const JobOptions& o, const cluster::Cluster& cluster,
                                          std::int64_t global_batch) {
  const int cluster_gpus = cluster.device_count();
  LOOM_RETURN_IF_ERROR(check_policy(o.policy));
  ResolvedRequest r;
  r.model_options = model_options_of(o);
  r.optimizer = o.optimizer;
  r.gpus = o.gpus > 0 ? o.gpus : cluster_gpus;
  if (r.gpus > cluster_gpus)
    return fail(fmt::format("the job needs {} GPUs, cluster '{}' has {}", r.gpus, cluster.name, cluster_gpus),
                "pick a larger cluster (`loom clusters`, or a preset with x<nodes>) or fewer GPUs");
  LOOM_RETURN_IF_ERROR(check_offload(o));
  if (is_search(o.policy)) return r;  // the search picks degrees and micro-batches
  LOOM_ASSIGN_OR_RETURN(r.config, resolve_degrees(o, r.gpus));
  LOOM_ASSIGN_OR_RETURN(r.config.micro_batches, resolve_micro_batches(o, r.config, global_batch));
  r.config.schedule = o.schedule;
  // The V of ZB-V and DualPipeV is 2 chunks per device.
  r.config.virtual_stages = plan::v_shaped(o.schedule) && o.interleave == 1 ? 2 : o.interleave;
  r.config.block_order = o.block_order;
  r.config.sequence_parallel = o.sequence_parallel;
  r.config.zero = o.zero;
  r.config.recompute = o.recompute;
  r.config.coshard = o.coshard;
  r.config.overlap = o.overlap;
  if (!o.tp_layers.empty()) {
    if (o.tp_layers == "auto")
      return fail("--tp-layers auto is chosen by the Oases planner, which this path does not run",
                  "plan it with `loom plan` (api::plan_or_search), or give the degrees: --tp-layers 2x8,4x16");
    if (o.policy != "megatron")
      return fail(fmt::format("--tp-layers {} sets per-layer degrees of the policy megatron, not {}", o.tp_layers,
                              o.policy),
                  "use --policy megatron (or oases), or drop --tp-layers");
    LOOM_ASSIGN_OR_RETURN(const std::vector<policy::DegreeRun> runs,
                          with_context(policy::parse_layer_degrees(o.tp_layers), "option --tp-layers"));
    r.config.layer_tp = policy::expand(runs);
  }
  return r;
}

}  // namespace loom::api
