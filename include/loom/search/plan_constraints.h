// User constraints on the plan space (nnScaler §4, its constraint tables): a YAML (or JSON) file that
// narrows what a search may choose, per op or module pattern and per degree (docs/constraints.md):
//
//   partition:                        # how tensor parallelism may split the ops a pattern matches
//     - ops: layers.*.mlp.fc1         #   op names (globs per dotted component, N-M ranges) or
//       dims: [o, replicate]          #   `types: [linear]`; the annotation identifiers allowed, or replicate
//       degrees: [2, 4]               #   the tp degrees allowed when split
//   replicate: [layers.*.ln1]         # ops tensor parallelism must not split
//   placement:                        # pipeline ranks of layer ranges / patterns, and the stage count
//     stages: 2
//     layers.0-11: stage 0
//   schedule: {kinds: [1f1b, interleaved], micro_batches: [8, 16], micro_batch_size: [1, 2]}
//   degrees: {dp: [..], tp: [..], pp: [..], zero: [..], recompute: [..], offload: [..], overlap: [..],
//             sequence_parallel: [..]}
//
// Reading checks the file alone (unknown or duplicate keys, malformed values); a ConstraintChecker then
// binds it to a job's graph (patterns matching no op, identifiers no matched op has) and decides, per
// configuration of the plan space, which entries it violates. The tensor-parallel split of each op and
// the pipeline rank of each layer come from the policy's own functions (policy::tensor_parallel_layout,
// policy::megatron_stages), so the checker sees what the policy will do. Data parallelism's and
// micro-batching's batch split is governed by `degrees` and `schedule`, not by `partition`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/exec/passes.h"
#include "loom/ir/graph.h"
#include "loom/plan/plan.h"
#include "loom/search/plan_space.h"

namespace loom::search {

// Where an entry sits, for errors: "partition[1]" at line 4 of the file.
struct EntryName {
  std::string path;  // "partition[1]", "replicate[0]", "placement.layers.0-11", "degrees.tp", "schedule.kinds"
  int line = 0;      // 1-based; 0: unknown
  bool operator==(const EntryName&) const = default;
};
std::string to_string(const EntryName& entry);  // "'degrees.tp' (line 3)"

// Which forward ops an entry covers: op names (dotted globs: '*' and '?' within a component, "N-M" a
// numeric range; a pattern naming a module covers the ops below it) or op types (globs).
struct OpPattern {
  std::string text;
  bool type = false;  // matches ir::Op::type instead of the name
  bool operator==(const OpPattern&) const = default;
};
bool matches(const OpPattern& pattern, const ir::Op& op);

struct PartitionRule {
  EntryName entry;
  std::vector<OpPattern> ops;
  std::vector<std::string> dims;  // annotation identifiers the split may take
  bool replicate = false;         // "replicate" among dims: may stay whole
  std::vector<int> degrees;       // tp degrees allowed when split; empty: any
  bool operator==(const PartitionRule&) const = default;
};

struct ReplicateRule {
  EntryName entry;
  std::vector<OpPattern> ops;
  bool operator==(const ReplicateRule&) const = default;
};

struct PlacementRule {
  EntryName entry;
  OpPattern ops;
  int stage = 0;  // pipeline rank
  bool operator==(const PlacementRule&) const = default;
};

// A list of allowed values with the entry that gave it; empty values: unconstrained.
template <class T>
struct Allowed {
  EntryName entry;
  std::vector<T> values;
  bool given() const { return !values.empty(); }
  bool allows(const T& value) const { return values.empty() || std::ranges::find(values, value) != values.end(); }
  bool operator==(const Allowed&) const = default;
};

// A pipeline schedule as the file names it: plan::parse_schedule_kind's names, "interleaved" for
// interleaved 1F1B.
using ScheduleName = std::string;

struct PlanConstraints {
  std::string source;  // the file, for errors
  std::vector<PartitionRule> partition;
  std::vector<ReplicateRule> replicate;
  std::vector<PlacementRule> placement;
  Allowed<int> stages;  // placement.stages: one value
  Allowed<ScheduleName> schedules;
  Allowed<int> micro_batches;
  Allowed<std::int64_t> micro_batch_size;
  Allowed<int> dp, tp, pp, zero;
  Allowed<std::string> recompute;  // policy::name(Recompute)
  Allowed<std::string> offload;    // exec::name(Offload)
  Allowed<std::string> overlap;    // policy::name(Overlap)
  Allowed<bool> sequence_parallel;
  bool operator==(const PlanConstraints&) const = default;
};

// Parses a constraint file's text; `source` names it in errors. Errors name the source, the entry (and
// its line) and the fix: unknown and duplicate keys, values of the wrong kind, unknown schedule /
// recompute / offload / overlap names, degrees below 1, malformed patterns, a partition without dims.
Expected<PlanConstraints> parse_plan_constraints(std::string_view text, std::string_view source);
// Reads and parses a file (YAML; JSON is accepted as YAML's flow form). Errors: as above, and a missing
// or unreadable file.
Expected<PlanConstraints> read_plan_constraints(const std::string& path);

// What one configuration is, as the checks read it (a Candidate, or an explicit policy's options).
struct ConfigView {
  policy::ParallelConfig config;
  std::int64_t micro_batch_size = 1;
  exec::Offload offload = exec::Offload::none;
};

// One entry a configuration breaks, and how.
struct Violation {
  EntryName entry;
  std::string reason;  // "tp 4 is not in [2]"
};

// The constraints bound to one job's graph.
class ConstraintChecker {
 public:
  // Errors: a pattern matching no forward op, a partition identifier no matched op's annotation has,
  // and entries that contradict each other or the job's GPUs whatever the configuration (naming both).
  static Expected<ConstraintChecker> bind(PlanConstraints constraints, const ir::Graph& graph,
                                          const ir::OpCatalog& catalog, int gpus);

  const PlanConstraints& constraints() const { return constraints_; }

  // Every entry `view` violates, in file order (empty: it satisfies them all). Tensor-parallel layouts
  // and stage partitions are computed once per (tp, sp) and (pp, chunks).
  std::vector<Violation> violations(const ConfigView& view);

  // The candidates that satisfy every entry, in their order; a candidate with sequence parallelism that
  // breaks the file but keeps it without is kept without. Errors when none does: the entry that alone
  // admits none of them, else the two entries that together admit none (both named), else all entries.
  // `space` names the candidates in the message ("auto's space", "megatron-best's grid").
  Expected<std::vector<Candidate>> restrict(const std::vector<Candidate>& candidates, std::string_view space,
                                            exec::Offload offload);

 private:
  ConstraintChecker(PlanConstraints constraints, const ir::Graph& graph, plan::Plan fresh,
                    const ir::OpCatalog& catalog, int gpus);
  Expected<void> check_static() const;
  void check_ops(const ConfigView& view, std::vector<Violation>& out);
  void check_placement(const ConfigView& view, std::vector<Violation>& out);

  PlanConstraints constraints_;
  const ir::Graph* graph_;
  plan::Plan fresh_;
  const ir::OpCatalog* catalog_;
  int gpus_;
  std::vector<std::vector<ir::OpId>> partition_ops_;  // by partition rule: the forward ops it covers
  std::vector<std::vector<ir::OpId>> replicate_ops_;
  std::vector<std::vector<ir::OpId>> placement_ops_;
  // (tp, sp) -> by OpId the split identifier ("" replicated); nullopt: the layout failed (no op check).
  std::map<std::pair<int, bool>, std::optional<std::vector<std::string>>> layouts_;
  std::map<std::pair<int, int>, std::optional<std::vector<int>>> stages_;  // (pp, chunks) -> rank by OpId
};

// The ops a plan (after a policy) splits along each identifier, read from its sub-ops' boxes alone: an
// evaluator independent of the checker, for tests and for checking a chosen plan. By OpId, forward ops:
// the identifiers (other than the op's batch identifier) some part holds less than whole of, with the
// number of pieces; and the pipeline ranks its parts run on, for a plan of `config`'s degrees.
struct PlannedOp {
  std::map<std::string, std::int64_t> splits;  // identifier -> pieces
  std::vector<int> ranks;                      // pipeline ranks, sorted, distinct
};
std::vector<PlannedOp> planned_ops(const plan::Plan& plan, const policy::ParallelConfig& config);

// The entries a planned plan violates by that reading (partition, replicate, placement only).
std::vector<Violation> plan_violations(const PlanConstraints& constraints, const plan::Plan& plan,
                                       const policy::ParallelConfig& config);

}  // namespace loom::search
