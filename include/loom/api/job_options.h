// The options of one planning job as a user states them (DESIGN.md, "Job"): a plain struct with one
// documented default per field, and the one keyword table that names each field for the command line
// (`--global-batch`) and for Python (`global_batch=`). The CLI registers its flags from the table and the
// bindings take their keywords from it, so both accept the same fields with the same defaults, parsed by
// the same code. Degrees, micro-batches and the GPU count are left as given (0: not given) and resolved
// once, against the cluster and the model's global batch, by resolve_request (resolve_request.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/passes.h"
#include "loom/ir/autograd.h"
#include "loom/ir/dtype.h"
#include "loom/models/zoo.h"
#include "loom/plan/schedule.h"
#include "loom/policy/coshard.h"
#include "loom/policy/overlap.h"
#include "loom/policy/recompute_policy.h"
#include "loom/sim/trace_devices.h"

namespace loom::api {

// Folded planning (exec/fold.h): one micro-batch of one data-parallel replica planned and materialized,
// repeated over the micro-batches and mirrored over the replicas (a ZeRO plan keeps every replica in the slice:
// policy::zero_folds). automatic folds a plan whose explicit form would exceed kFoldAboveSubOps sub-ops
// (ops x dp x tp x micro-batches).
enum class Fold : std::uint8_t { automatic, off, on };
std::string_view name(Fold fold);  // "auto", "off", "on"

struct JobOptions {
  // The model: exactly one source.
  std::string model;       // a preset (`loom models`)
  std::string model_file;  // or a model file (YAML / JSON, docs/models.md)
  // Or a family by its numbers (docs/models.md): `arch.family` ("gpt") and its sizes; its layers, seq,
  // vocab and batch are the fields below (arch's own stay 0).
  models::ModelSpec arch;
  std::string graph_file;  // or a graph JSON file (`loom.trace`), planned at its traced sizes
  std::string graph_text;  // or that JSON itself (the bindings); "the graph JSON" in errors
  std::string onnx_dims;   // sizes of an ONNX graph file's symbolic dims: "batch=8,seq=128"; "": none
  // A preset's sizes (a graph keeps those it was traced at); with --arch, the architecture's.
  std::int64_t global_batch = 0;      // samples per step; 0: the preset's
  std::int64_t seq = 0;               // sequence length or image side; 0: the preset's
  std::int64_t layers = 0;            // depth; 0: the preset's
  std::int64_t vocab_multiple = 128;  // vocabulary padded to a multiple of this, as Megatron-LM does
  std::int64_t vocab = 0;             // tokens of the vocabulary; 0: the preset's
  ir::DType dtype = ir::DType::bf16;  // weights and activations
  bool shrink = false;                // tiny widths with the preset's architecture (verification)
  models::AttentionImpl attention = models::AttentionImpl::fused;  // a preset's attention form (models/zoo.h)

  ir::OptimizerOptions optimizer;  // AdamW with fp32 master weights (ir/autograd.h)

  std::string cluster = "dgx-a100";  // a preset (`loom clusters`) or a YAML / JSON cluster file
  int gpus = 0;                      // GPUs the plan uses; 0: every GPU of the cluster
  std::string profile;               // a profile database overriding the roofline (cost/profile_db.h)
  // The cluster whose links price the layout search (which collectives move each tensor); "": `cluster`.
  // Another one plans the communication for that machine and predicts it on `cluster`.
  std::string layout_cluster;

  // The policy and its degrees (Megatron-LM's semantics, resolve_request.h).
  std::string policy = "megatron";
  int dp = 0;                          // 0: the GPUs over tp x pp (the policy's default without degrees)
  int tp = 0;                          // 0: 1, or the policy's default without degrees
  int pp = 0;                          // 0: 1, or the policy's default without degrees
  int micro_batches = 0;               // per step; 0: from micro_batch_size, else 2 x pp when pipelined, else 1
  std::int64_t micro_batch_size = 0;   // samples per micro-batch and dp rank; 0: from micro_batches
  plan::ScheduleKind schedule = plan::ScheduleKind::one_f_one_b;
  int interleave = 1;                  // model chunks per pipeline device (interleaved 1F1B above 1)
  plan::BlockOrder block_order = plan::BlockOrder::strict;  // how a pipeline block follows the one before
  bool sequence_parallel = false;
  int zero = 0;                        // ZeRO stage over the dp ranks (0: off)
  policy::Recompute recompute = policy::Recompute::none;
  bool recompute_collectives = false;  // recomputation sums partial sums again (exec/materialize.h)
  // Coshard (policy/coshard.h): parts per device (0: the policy's default), layers (nullopt: the policy's
  // default), op classes (attention and MLP).
  policy::CoshardConfig coshard;
  policy::Overlap overlap = policy::Overlap::none;  // Oases' overlapped tensor parallelism (policy/overlap.h)
  // Per-layer tensor-parallel degrees (policy/layer_degrees.h): "" every layer at tp; "2x8,4x16"; "auto":
  // chosen by the Oases planner (api/oases_plan.h; also what --policy oases sets).
  std::string tp_layers;
  Fold fold = Fold::automatic;
  bool layout_search = true;           // materialize with the RVD layout search (false: p2p fallback only)
  double bucket_cap_mb = 25;           // gradient buckets (exec/passes.h), MiB as DDP's bucket_cap_mb; 0: none
  int prefetch_depth = 1;              // ZeRO-3 parameter gathers in flight ahead (exec/passes.h); 0: none
  // ZeRO-Offload (exec/passes.h, offload_to_host): optimizer states and steps on the host (ZeRO >= 1),
  // and the 16-bit parameters too (ZeRO-3); policies megatron and zero.
  exec::Offload offload = exec::Offload::none;
  bool exec_passes = true;             // false: the ExecPlan as materialized (tests of the passes)

  // A search's time limit in seconds (api/auto_search.h): pricing and planning stop when spent, the best
  // plan so far kept; 0: none.
  double budget = 0;
  // A constraint file (search/plan_constraints.h, docs/constraints.md): the searches plan only within it,
  // an explicit policy is refused where it breaks it; "": none.
  std::string constraints;

  // The devices trace.json draws (sim/trace_devices.h): default one track per device class.
  sim::TraceDevices trace_devices;
};

// Which commands take a field: a command registers the groups it needs.
enum class OptionGroup : std::uint8_t { model, sizes, optimizer, cluster, parallel, fold, passes, report };

enum class ValueKind : std::uint8_t { whole, real, flag, text };

struct OptionField {
  std::string_view keyword;  // the Python keyword: "global_batch"
  std::string_view flag;     // the command-line flag: "--global-batch"
  std::vector<std::string_view> aliases;  // older names accepted too: "--batch", "batch"
  OptionGroup group;
  ValueKind kind;
  std::string_view help;
  // Parses `text` into the field: a whole number, a real, "true"/"false" for flags, or the text itself
  // (enumerations parsed by name). Errors say what is wrong with the value, not which option it is.
  Expected<void> (*set)(JobOptions&, std::string_view text);
  std::string (*get)(const JobOptions&);  // the value as text (help's defaults, `--json` echoes)
};

// Every field, in the order `--help` lists them.
std::span<const OptionField> option_fields();

// The field named `name` (a keyword, a flag, or an alias); nullptr when none.
const OptionField* find_option(std::string_view name);

// Sets the field called `name` from `text`. Errors name the option as the caller spells it
// ("option --tp: ...", "keyword tp: ...") and suggest the closest known name for an unknown one.
Expected<void> set_option(JobOptions& options, std::string_view name, std::string_view text);

}  // namespace loom::api
