#include "loom/api/job_options.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/suggest.h"

namespace loom::api {
namespace {

template <class T>
Expected<T> parse_whole(std::string_view text, T low, T high) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    return fail(fmt::format("'{}' is not an integer", text), fmt::format("give an integer in [{}, {}]", low, high));
  if (value < low || value > high)
    return fail(fmt::format("{} is outside [{}, {}]", value, low, high),
                fmt::format("give an integer in [{}, {}]", low, high));
  return value;
}

Expected<double> parse_real(std::string_view text, double low, double high) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    return fail(fmt::format("'{}' is not a finite number", text), "e.g. 0.001 or 1e-3");
  if (value < low || value > high)
    return fail(fmt::format("{} is outside [{}, {}]", value, low, high),
                fmt::format("give a number in [{}, {}]", low, high));
  return value;
}

Expected<bool> parse_flag(std::string_view text) {
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  return fail(fmt::format("'{}' is not true or false", text));
}

Expected<plan::ScheduleKind> parse_schedule(std::string_view text) { return plan::parse_schedule_kind(text); }

std::string_view schedule_text(plan::ScheduleKind kind) { return plan::name(kind); }

Expected<Fold> parse_fold(std::string_view text) {
  if (text == "auto") return Fold::automatic;
  if (text == "on") return Fold::on;
  if (text == "off") return Fold::off;
  return fail(fmt::format("unknown fold '{}'", text), "use auto, on or off");
}

std::string real_text(double value) { return fmt::format("{}", value); }

std::string arch_text(const JobOptions& o, models::SpecField field) {
  return models::given(o.arch, field) ? models::value_text(o.arch, field) : std::string();
}

constexpr std::int64_t kMaxCount = std::int64_t{1} << 24;
constexpr int kMaxDegree = 1 << 20;

// Field accessors as captureless lambdas: one line per field in the table below.
#define LOOM_WHOLE(member, low, high)                                                                    \
  [](JobOptions& o, std::string_view t) -> Expected<void> {                                             \
    LOOM_ASSIGN_OR_RETURN(o.member, parse_whole<decltype(o.member)>(t, low, high));                     \
    return {};                                                                                          \
  },                                                                                                    \
      [](const JobOptions& o) { return std::to_string(o.member); }
#define LOOM_REAL(member, low, high)                                                                     \
  [](JobOptions& o, std::string_view t) -> Expected<void> {                                             \
    LOOM_ASSIGN_OR_RETURN(o.member, parse_real(t, low, high));                                          \
    return {};                                                                                          \
  },                                                                                                    \
      [](const JobOptions& o) { return real_text(o.member); }
#define LOOM_FLAG(member)                                                                                \
  [](JobOptions& o, std::string_view t) -> Expected<void> {                                             \
    LOOM_ASSIGN_OR_RETURN(o.member, parse_flag(t));                                                     \
    return {};                                                                                          \
  },                                                                                                    \
      [](const JobOptions& o) { return std::string(o.member ? "true" : "false"); }
#define LOOM_TEXT(member)                                                                                \
  [](JobOptions& o, std::string_view t) -> Expected<void> {                                             \
    o.member = std::string(t);                                                                          \
    return {};                                                                                          \
  },                                                                                                    \
      [](const JobOptions& o) { return o.member; }
#define LOOM_NAMED(member, parse)                                                                        \
  [](JobOptions& o, std::string_view t) -> Expected<void> {                                             \
    LOOM_ASSIGN_OR_RETURN(o.member, parse(t));                                                          \
    return {};                                                                                          \
  },                                                                                                    \
      [](const JobOptions& o) { return std::string(name(o.member)); }

// A field of --arch's spec (models/model_spec.h), read as a model file reads it; "" when not given.
#define LOOM_ARCH(field)                                                                                 \
  [](JobOptions& o, std::string_view t) { return models::set_field(o.arch, models::SpecField::field, t); }, \
      [](const JobOptions& o) { return arch_text(o, models::SpecField::field); }

using G = OptionGroup;
using K = ValueKind;
constexpr double kHuge = std::numeric_limits<double>::max();

const std::vector<OptionField>& table() {
  static const std::vector<OptionField> fields = {
      {"model", "--model", {}, G::model, K::text, "Model preset (see `loom models`)", LOOM_TEXT(model)},
      {"model_file", "--model-file", {}, G::model, K::text,
       "A model file (YAML or JSON: a family and its sizes, docs/models.md) instead of --model",
       LOOM_TEXT(model_file)},
      {"arch", "--arch", {}, G::model, K::text,
       "A model family built from its numbers instead of --model: gpt, llama, bert, t5, mbart, moe, swin, alphafold, "
       "resnet, vgg or unet, with --layers, --hidden, --heads, ... (the family's fields, docs/models.md)",
       LOOM_TEXT(arch.family)},
      // --arch's sizes; the aliases are Megatron-LM's flags. --layers, --seq, --vocab and --global-batch below.
      {"hidden", "--hidden", {"--hidden-size"}, G::model, K::whole, "--arch: model width (d_model)", LOOM_ARCH(hidden)},
      {"heads", "--heads", {"--num-attention-heads"}, G::model, K::whole, "--arch: attention heads", LOOM_ARCH(heads)},
      {"kv_heads", "--kv-heads", {"--num-query-groups"}, G::model, K::whole,
       "--arch: key/value heads of grouped-query attention (default: heads)", LOOM_ARCH(kv_heads)},
      {"head_dim", "--head-dim", {"--kv-channels"}, G::model, K::whole,
       "--arch: channels per attention head (default: hidden / heads)", LOOM_ARCH(head_dim)},
      {"ffn", "--ffn", {"--ffn-hidden-size"}, G::model, K::whole, "--arch: the MLP's inner width", LOOM_ARCH(ffn)},
      {"positions", "--positions", {"--max-position-embeddings"}, G::model, K::whole,
       "--arch: rows of a learned position table (default: seq)", LOOM_ARCH(positions)},
      {"experts", "--experts", {"--num-experts"}, G::model, K::whole, "--arch: experts of an MoE layer",
       LOOM_ARCH(experts)},
      {"classes", "--classes", {}, G::model, K::whole, "--arch: classifier outputs", LOOM_ARCH(classes)},
      {"window", "--window", {}, G::model, K::whole, "--arch: Swin's attention window side", LOOM_ARCH(window)},
      {"channels", "--channels", {}, G::model, K::whole, "--arch: a CNN's stem width", LOOM_ARCH(channels)},
      {"width_factor", "--width-factor", {}, G::model, K::whole, "--arch: Wide-ResNet's widening of the 3x3 conv",
       LOOM_ARCH(width_factor)},
      {"rope_base", "--rope-base", {"--rotary-base"}, G::model, K::real, "--arch: RoPE theta", LOOM_ARCH(rope_base)},
      {"norm_eps", "--norm-eps", {"--norm-epsilon"}, G::model, K::real, "--arch: RMSNorm epsilon", LOOM_ARCH(norm_eps)},
      {"graph_file", "--graph", {}, G::model, K::text,
       "A graph file instead of --model: JSON (written by the Python tracer or `loom graph --json`) or an ONNX model "
       "(.onnx, docs/onnx.md)",
       LOOM_TEXT(graph_file)},
      {"onnx_dims", "--onnx-dim", {}, G::model, K::text,
       "Sizes of an ONNX model's symbolic input dims, NAME=SIZE[,NAME=SIZE...] (docs/onnx.md)", LOOM_TEXT(onnx_dims)},
      {"global_batch", "--global-batch", {"--batch", "batch", "--global-batch-size"}, G::sizes, K::whole,
       "Samples per step (default: the preset's)", LOOM_WHOLE(global_batch, 1, kMaxCount)},
      {"seq", "--seq", {"--seq-length"}, G::sizes, K::whole, "Sequence length or image side (default: the preset's)",
       LOOM_WHOLE(seq, 1, kMaxCount)},
      {"layers", "--layers", {"--num-layers"}, G::sizes, K::whole, "Override the depth (with --arch: the depth)",
       LOOM_WHOLE(layers, 1, 4096)},
      {"vocab_multiple", "--vocab-multiple", {}, G::sizes, K::whole,
       "Pad the vocabulary to a multiple of this, as Megatron-LM does (1: no padding)",
       LOOM_WHOLE(vocab_multiple, 1, 65536)},
      {"vocab", "--vocab", {}, G::sizes, K::whole,
       "Replace a language model's vocabulary with this many tokens (default: the preset's)",
       LOOM_WHOLE(vocab, 1, kMaxCount)},
      {"dtype", "--dtype", {}, G::sizes, K::text, "Weights and activations: bf16, f16 or f32",
       LOOM_NAMED(dtype, ir::parse_dtype)},
      {"shrink", "--shrink", {}, G::sizes, K::flag, "Shrink the preset to tiny widths, as `loom verify` does",
       LOOM_FLAG(shrink)},
      {"attention", "--attention", {}, G::sizes, K::text,
       "Attention form: fused (one flash-style kernel; the scores are never held) or eager (q k^T, mask, softmax, "
       "dropout and the product with v as PyTorch 1.x and Megatron-LM v3 run them: scores held and saved) or "
       "eager-fp32 (eager with the softmax in fp32: Megatron-LM v3 above 4096 keys, 16-bit scores cast to fp32, "
       "scaled, masked, softmaxed, cast back)",
       LOOM_NAMED(attention, models::parse_attention_impl)},
      {"optimizer", "--optimizer", {}, G::optimizer, K::text, "Update rule: sgd, adam or adamw",
       LOOM_NAMED(optimizer.kind, ir::parse_optimizer)},
      {"lr", "--lr", {}, G::optimizer, K::real, "Learning rate", LOOM_REAL(optimizer.lr, 0, kHuge)},
      {"beta1", "--beta1", {}, G::optimizer, K::real, "Adam's first-moment decay", LOOM_REAL(optimizer.beta1, 0, 1)},
      {"beta2", "--beta2", {}, G::optimizer, K::real, "Adam's second-moment decay", LOOM_REAL(optimizer.beta2, 0, 1)},
      {"eps", "--eps", {}, G::optimizer, K::real, "Adam's denominator epsilon", LOOM_REAL(optimizer.eps, 0, kHuge)},
      {"weight_decay", "--weight-decay", {}, G::optimizer, K::real, "AdamW's decoupled weight decay",
       LOOM_REAL(optimizer.weight_decay, 0, kHuge)},
      {"momentum", "--momentum", {}, G::optimizer, K::real, "SGD's momentum (0: none)",
       LOOM_REAL(optimizer.momentum, 0, 1)},
      {"master_weights", "--master-weights", {}, G::optimizer, K::flag,
       "Keep fp32 master copies of 16-bit parameters (mixed-precision Adam)", LOOM_FLAG(optimizer.master_weights)},
      {"cluster", "--cluster", {}, G::cluster, K::text, "Cluster preset (see `loom clusters`) or a YAML / JSON file",
       LOOM_TEXT(cluster)},
      {"gpus", "--gpus", {"--devices", "devices"}, G::cluster, K::whole,
       "GPUs the plan uses (default: every GPU of the cluster)", LOOM_WHOLE(gpus, 1, kMaxDegree)},
      {"profile", "--profile", {}, G::cluster, K::text, "Profile database overriding the roofline (see `loom profile`)",
       LOOM_TEXT(profile)},
      {"layout_cluster", "--layout-cluster", {}, G::cluster, K::text,
       "Price the layout search (which collectives move each tensor) on this cluster instead of --cluster: the "
       "communication planned for one machine, predicted on another",
       LOOM_TEXT(layout_cluster)},
      {"policy", "--policy", {}, G::parallel, K::text,
       "Policy: dp, tp, dp-tp, pp, megatron, coshard, interlaced, zero; or a search: auto (the whole space, "
       "docs/search.md), or a baseline's grid: megatron-best, deepspeed-best; or oases (megatron with --overlap oases "
       "and the Oases planner's --tp-layers auto)",
       LOOM_TEXT(policy)},
      {"dp", "--dp", {}, G::parallel, K::whole, "Data-parallel degree (default: the GPUs over tp x pp)",
       LOOM_WHOLE(dp, 1, kMaxDegree)},
      {"tp", "--tp", {}, G::parallel, K::whole, "Tensor-parallel degree (default 1)", LOOM_WHOLE(tp, 1, kMaxDegree)},
      {"pp", "--pp", {}, G::parallel, K::whole, "Pipeline stages (default 1)", LOOM_WHOLE(pp, 1, kMaxDegree)},
      {"micro_batches", "--microbatches", {"--micro-batches"}, G::parallel, K::whole,
       "Micro-batches per step: pipelined, or gradients accumulated (default: from --micro-batch-size, else 2 x "
       "stages with --pp, else 1)",
       LOOM_WHOLE(micro_batches, 1, kMaxDegree)},
      {"micro_batch_size", "--micro-batch-size", {}, G::parallel, K::whole,
       "Samples per micro-batch on each dp rank, as Megatron-LM's: micro-batches = global batch / (dp x this)",
       LOOM_WHOLE(micro_batch_size, 1, kMaxCount)},
      {"schedule", "--schedule", {}, G::parallel, K::text, "Pipeline schedule: gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipe-v or 3f1b (zero-bubble: backward split into B and W; zb-v and dualpipe-v: 2 chunks per device in a V; 3f1b: a model's recycled passes pipelined, nnScaler Table 7)",
       [](JobOptions& o, std::string_view t) -> Expected<void> {
         LOOM_ASSIGN_OR_RETURN(o.schedule, parse_schedule(t));
         return {};
       },
       [](const JobOptions& o) { return std::string(schedule_text(o.schedule)); }},
      {"interleave", "--interleave", {"virtual_stages"}, G::parallel, K::whole,
       "Model chunks per pipeline device: interleaved 1F1B over chunks of whole layers (micro-batches a multiple "
       "of --pp)",
       LOOM_WHOLE(interleave, 1, 1024)},
      {"block_order", "--block-order", {}, G::parallel, K::text,
       "How each pipeline block follows the block before it on its device: strict (every sub-op after the whole "
       "block before, one block at a time, as Megatron-LM runs) or hoist (only the block's first sub-op: sub-ops "
       "that do not wait for it, e.g. a decoder's next cross-attention keys and values, may run inside the block "
       "before; a Loom order that can fill bubbles, docs/schedules.md); policies megatron, coshard and pp",
       LOOM_NAMED(block_order, plan::parse_block_order)},
      {"sequence_parallel", "--sp", {}, G::parallel, K::flag,
       "Sequence parallelism: split norms, dropouts and residual adds along the sequence over the tp ranks",
       LOOM_FLAG(sequence_parallel)},
      {"zero", "--zero", {}, G::parallel, K::whole,
       "ZeRO stage over the dp ranks (policies zero, megatron): 1 partitions optimizer states, 2 also gradients, 3 "
       "also parameters",
       LOOM_WHOLE(zero, 0, 3)},
      {"recompute", "--recompute", {}, G::parallel, K::text,
       "Activation recomputation: none, selective (Megatron-LM's: core attention), full, or memory-bound (the "
       "layers' memory-bound ops only)",
       LOOM_NAMED(recompute, policy::parse_recompute)},
      {"recompute_collectives", "--recompute-collectives", {}, G::parallel, K::flag,
       "Recomputation issues again the all-reduces of the partial sums it recomputes (row-parallel linears), as "
       "Megatron-LM's full recompute; default: their sums are checkpoints, no collective in the recompute (Oases' "
       "fine-grained recompute)",
       LOOM_FLAG(recompute_collectives)},
      {"coshard", "--coshard", {}, G::parallel, K::whole,
       "Coshard (policies megatron, coshard): tensor-parallel regions split into C parts per tp rank, run one after "
       "another and recomputed (default: off; 4 for the policy coshard)",
       LOOM_WHOLE(coshard.parts, 1, 1 << 16)},
      {"coshard_layers", "--coshard-layers", {}, G::parallel, K::text,
       "Layers to coshard, A:B as a Python slice of the layers numbered from 0 (default: every layer; the first "
       "quarter for the policy coshard)",
       [](JobOptions& o, std::string_view t) -> Expected<void> {
         o.coshard.layers.reset();  // "": the policy's default
         if (!t.empty()) {
           LOOM_ASSIGN_OR_RETURN(o.coshard.layers, policy::parse_layer_range(t));
         }
         return {};
       },
       [](const JobOptions& o) { return o.coshard.layers ? policy::to_string(*o.coshard.layers) : std::string(); }},
      {"coshard_ops", "--coshard-ops", {}, G::parallel, K::text,
       "Regions to coshard: attention, mlp or attention,mlp",
       [](JobOptions& o, std::string_view t) -> Expected<void> {
         LOOM_ASSIGN_OR_RETURN(o.coshard.ops, policy::parse_coshard_ops(t));
         return {};
       },
       [](const JobOptions& o) { return policy::to_string(o.coshard.ops); }},
      {"overlap", "--overlap", {}, G::parallel, K::text,
       "Overlap tensor parallelism's collectives with compute: none, or oases (each tensor-parallel block as 2 "
       "sub-batches, one's all-reduce beside the other's compute; tp > 1; with pp, the 1f1b or gpipe schedule)",
       LOOM_NAMED(overlap, policy::parse_overlap)},
      {"tp_layers", "--tp-layers", {}, G::parallel, K::text,
       "Per-layer tensor-parallel degrees inside the tp group, as runs DEGREExLAYERS (2x8,4x16: the first 8 layers "
       "tp 2, as 2 data-parallel copies in a tp-4 group, the next 16 tp 4); auto: chosen by the Oases planner "
       "(docs/search.md); policy megatron",
       LOOM_TEXT(tp_layers)},
      {"bucket_cap_mb", "--bucket-cap-mb", {}, G::passes, K::real,
       "Gradient buckets of the data-parallel all-reduce, MiB, as DDP's bucket_cap_mb (first bucket 1 MiB); 0: every "
       "gradient reduced on its own, blocking",
       LOOM_REAL(bucket_cap_mb, 0, 1 << 20)},
      {"budget", "--budget", {}, G::parallel, K::real,
       "A search's time limit in seconds (--policy auto, megatron-best, deepspeed-best): the best plan found when it is "
       "spent; 0: none",
       LOOM_REAL(budget, 0, 1e9)},
      {"constraints", "--constraints", {}, G::parallel, K::text,
       "A constraint file (YAML or JSON, docs/constraints.md) restricting the search (auto, megatron-best, "
       "deepspeed-best) or checked against an explicit policy: per-op partitions, replication, stage placement, "
       "schedules, degrees",
       LOOM_TEXT(constraints)},
      {"prefetch_depth", "--prefetch-depth", {}, G::passes, K::whole,
       "ZeRO-3 parameter all-gathers started ahead of the one being read, as DeepSpeed's stage-3 prefetcher (1: "
       "the next module's while the current one computes); 0: every gather blocking where it is read",
       LOOM_WHOLE(prefetch_depth, 0, 1 << 20)},
      {"offload", "--offload", {}, G::passes, K::text,
       "ZeRO-Offload, as DeepSpeed's offload_optimizer / offload_param with device cpu: none, optimizer (fp32 "
       "master weights and Adam states on the host, each gradient shard copied there, the step run by the CPU, "
       "the 16-bit shard copied back; ZeRO >= 1) or optimizer+params (also the 16-bit parameter shards, fetched "
       "before each all-gather; ZeRO-3); policies megatron and zero",
       LOOM_NAMED(offload, exec::parse_offload)},
      {"fold", "--fold", {}, G::fold, K::text,
       "Plan one micro-batch and repeat it (megatron: of one replica; ZeRO: of every replica, ZeRO-1 across nodes, "
       "ZeRO-2/3 within one node): auto (large jobs), on, off",
       LOOM_NAMED(fold, parse_fold)},
      {"trace_devices", "--trace-devices", {}, G::report, K::text,
       "The devices trace.json draws: classes (one track per device class, named by the devices it stands for), "
       "all, or ids and ranges such as 0,5 or 0-3,8",
       [](JobOptions& o, std::string_view t) -> Expected<void> {
         LOOM_ASSIGN_OR_RETURN(o.trace_devices, sim::parse_trace_devices(t));
         return {};
       },
       [](const JobOptions& o) { return sim::to_string(o.trace_devices); }},
  };
  return fields;
}

#undef LOOM_WHOLE
#undef LOOM_REAL
#undef LOOM_FLAG
#undef LOOM_TEXT
#undef LOOM_NAMED

}  // namespace

std::string_view name(Fold fold) {
  switch (fold) {
    case Fold::automatic: return "auto";
    case Fold::off: return "off";
    case Fold::on: return "on";
  }
  return "?";
}

std::span<const OptionField> option_fields() { return table(); }

const OptionField* find_option(std::string_view name) {
  for (const OptionField& f : table()) {
    if (f.keyword == name || f.flag == name) return &f;
    for (std::string_view alias : f.aliases)
      if (alias == name) return &f;
  }
  return nullptr;
}

Expected<void> set_option(JobOptions& options, std::string_view name, std::string_view text) {
  const bool flag_form = name.starts_with("--");
  const std::string label = fmt::format("{} {}", flag_form ? "option" : "keyword", name);
  const OptionField* field = find_option(name);
  if (field == nullptr) {
    std::vector<std::string> known;
    for (const OptionField& f : table()) known.emplace_back(flag_form ? f.flag : f.keyword);
    const std::string guess = did_you_mean(name, known);
    return fail(fmt::format("unknown {}", label), guess.empty() ? fmt::format("known: {}", join(known, ", ")) : guess);
  }
  return with_context(field->set(options, text), label);
}

}  // namespace loom::api
