// `loom plan --emit DIR`: the per-rank PyTorch modules and their manifest (codegen/rank_programs.h)
// of a materialized job, written into a directory for python/loom/runtime to run.
#pragma once

#include <string>
#include <vector>

#include "loom/api/job.h"
#include "loom/core/error.h"
#include "loom/core/output_set.h"

namespace loom::api {

// Adds DIR/rank_<r>.py for every rank, then DIR/manifest.json, to `set` (written all or none by
// OutputSet::commit). A folded plan is refused (codegen needs every rank's program).
Expected<void> add_rank_programs(const Job& job, const std::string& dir, OutputSet& set);

// add_rank_programs as a set of its own, committed; returns the paths written.
Expected<std::vector<std::string>> write_rank_programs(const Job& job, const std::string& dir);

}  // namespace loom::api
