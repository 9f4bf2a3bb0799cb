// `loom plan --emit DIR`: the per-rank PyTorch modules and their manifest (codegen/rank_programs.h)
// of a materialized job, written into a directory for python/loom/runtime to run.
#pragma once

#include <string>
#include <vector>

#include "loom/api/job.h"
#include "loom/core/error.h"

namespace loom::api {

// Writes DIR/rank_<r>.py for every rank and DIR/manifest.json (created when missing, each file
// atomically); returns their paths. A folded plan is refused (codegen needs every rank's program).
Expected<std::vector<std::string>> write_rank_programs(const Job& job, const std::string& dir);

}  // namespace loom::api
