// Private to codegen: the gradient reducer of the generated programs (docs/codegen.md, "Gradient buckets").
//
// The ExecPlan reduces each parameter gradient where the optimizer first needs it, one reduction per
// gradient: an all-reduce, or (for small gradients, where the layout search priced it cheaper) every member
// sending its value part to the others and combining the parts. Run that way on gloo, every gradient pays
// a collective's latency and nothing overlaps the backward. As torch DDP does, codegen instead
//   - groups consecutive reductions over the same group (in the order their gradients become final) into
//     buckets closed once they hold kBucketBytes (the first kFirstBucketBytes), one flat all-reduce each
//     (the same sum of the same parts), and
//   - issues each bucket asynchronously right after the instruction that finalizes its last gradient
//     (`h = rt.all_reduce_start(...)`), waiting where the first of its reductions stood (`... = rt.wait(h)`).
// An exchange of an activation's parts (not a parameter gradient) becomes one synchronous all-reduce.
// The grouping and order are plan facts (every rank's program is known here), so the buckets are decided
// once for all ranks and checked to be issued in the same order by every member of each process group;
// where a check fails, the ranks' programs are left as the ExecPlan wrote them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "loom/exec/exec_plan.h"

namespace loom::codegen::detail {

// DDP's default bucket_cap_mb (25 MiB), and its smaller first bucket (1 MiB,
// torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): the first gradients of the backward start reducing early.
inline constexpr std::int64_t kBucketBytes = std::int64_t{25} << 20;
inline constexpr std::int64_t kFirstBucketBytes = std::int64_t{1} << 20;

struct GradientBucket {
  std::vector<int> group;               // ascending ranks
  int index = 0;                        // the bucket's position among its group's buckets (same on every member)
  std::vector<exec::BufferId> inputs;   // this rank's gradient value parts, in the flat buffer's order
  std::vector<exec::BufferId> outputs;  // the reduced gradients, aligned with inputs
  std::vector<std::string> tensors;     // the gradients' names, for the comment
  std::int64_t bytes = 0;
};

// An exchange of value parts of an activation (each member sends its part to the others, receives theirs
// and combines them into the whole, as the plan writes small V->R reductions) emitted as the all-reduce it
// is: one collective instead of 2 (n - 1) transfers and an element-wise combine.
struct ExchangeAllReduce {
  exec::BufferId input, output;
  std::vector<int> group;               // ascending ranks
  std::vector<plan::SubTensor> parts;   // each member's input piece, in group order
};

// What the module writer changes in one rank's program.
struct RankBuckets {
  std::map<std::size_t, ExchangeAllReduce> all_reduce_at;  // instruction index (the combine) -> its all-reduce
  std::vector<GradientBucket> buckets;
  std::map<std::size_t, std::vector<int>> issue_after;  // instruction index -> buckets issued after it
  std::map<std::size_t, std::vector<int>> wait_before;  // instruction index -> buckets waited before it
  std::set<std::size_t> skipped;                        // the replaced reductions' instructions
};

// By rank; every entry empty when no reduction qualifies (or the plan's ranks would disagree).
std::vector<RankBuckets> plan_gradient_buckets(const exec::ExecPlan& exec, std::int64_t cap_bytes = kBucketBytes,
                                               std::int64_t first_cap_bytes = kFirstBucketBytes);

}  // namespace loom::codegen::detail
