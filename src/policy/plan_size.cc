#include "loom/policy/plan_size.h"

namespace loom::policy {
namespace {

// The memory planning an explicit plan takes, per sub-op, measured on gpt3-125m (dp 16-128, 2-12 layers):
// about 5 KiB without ZeRO; ZeRO's parameter gathers and gradient shards add pieces and sends per rank,
// about 64 bytes more per data-parallel rank (9 KiB at dp 64, 13 KiB at dp 128).
constexpr double kPlanBytesPerSubOp = 5 << 10;
constexpr double kZeroPlanBytesPerRank = 64;

}  // namespace

double explicit_sub_ops(std::int64_t forward_ops, const ParallelConfig& c, int micro_batches) {
  return 3.0 * static_cast<double>(forward_ops) * c.dp * c.tp * micro_batches;
}

double explicit_plan_bytes(std::int64_t forward_ops, const ParallelConfig& c, int micro_batches) {
  const double per_sub_op = kPlanBytesPerSubOp + (c.zero > 0 ? kZeroPlanBytesPerRank * c.dp : 0);
  return explicit_sub_ops(forward_ops, c, micro_batches) * per_sub_op;
}

double explicit_plan_bytes_limit() { return static_cast<double>(kExplicitSubOpLimit) * kPlanBytesPerSubOp; }

bool zero_folds(const ParallelConfig& c, int gpus_per_node) {
  return !(c.zero == 1 && c.tp > 1) && (c.zero == 1 || c.dp * c.tp * c.pp <= gpus_per_node);
}

}  // namespace loom::policy
