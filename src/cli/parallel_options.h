// The parallelization options `loom plan`, `loom compare` (and `loom verify`) share: the policy's degrees,
// micro-batches, schedule, interleaving and sequence parallelism, turned into a policy::ParallelConfig.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "loom/core/error.h"
#include "loom/policy/policy.h"

namespace loom::cli {

struct ParallelArgs {
  std::string devices_flag = "--gpus";  // how the command names the device count
  int gpus = 0;  // the device count a policy with one degree puts on that degree
  int dp = 0, tp = 0, pp = 0;
  int micro_batches = 0;
  std::string schedule = "1f1b";
  int interleave = 1;
  bool sequence_parallel = false;
  std::string recompute = "none";
  int zero = 0;
};

// Registers --gpus (or args->devices_flag), --dp, --tp, --pp, --microbatches, --schedule, --interleave, --sp,
// --recompute and --zero.
void add_parallel_options(CLI::App* command, ParallelArgs* args);

// Explicit --dp/--tp/--pp, else all of --gpus on the policy's own dimension (dp-tp: 2 on tp, the rest on
// dp; megatron: tp up to 8 inside a node, the rest on dp). Micro-batches default to 1, or 2 x pp when
// pipelined (interleaved: a multiple of pp).
Expected<policy::ParallelConfig> parallel_config(const std::string& policy, const ParallelArgs& args);

}  // namespace loom::cli
