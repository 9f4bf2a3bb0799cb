// How far the roofline is from measurements (docs/profiling.md): for each distinct key of a plan that the
// profile database holds, the compute model's roofline time next to the measured one, summarized per op
// class. A ratio above 1 means the roofline is too slow (pessimistic), below 1 too fast (optimistic).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "loom/cost/compute_model.h"
#include "loom/cost/profile_db.h"
#include "loom/ir/op_def.h"
#include "loom/plan/plan.h"

namespace loom::cost {

struct RooflineComparison {
  ProfileKey key;
  ir::OpClass op_class = ir::OpClass::elementwise;
  ComputeEstimate roofline;  // without the database
  double measured_seconds = 0;

  double ratio() const { return roofline.seconds / measured_seconds; }
};

// One row per distinct measured key of `plan`, in key order. `roofline` must be built over `plan`
// without a database; keys are looked up in `measured` on roofline.gpu().name.
std::vector<RooflineComparison> compare_roofline(const plan::Plan& plan, const ir::OpCatalog& catalog,
                                                 const ComputeModel& roofline, const ProfileDb& measured);

struct ClassAccuracy {
  ir::OpClass op_class = ir::OpClass::elementwise;
  std::size_t keys = 0;
  double median_ratio = 0;  // roofline / measured
  double worst_ratio = 0;   // the ratio farthest from 1 (in log terms)
  ProfileKey worst;
};

// Per op class present in `rows`, in OpClass order; rows whose roofline is zero (no work) are left out.
std::vector<ClassAccuracy> accuracy_by_class(std::span<const RooflineComparison> rows);

}  // namespace loom::cost
