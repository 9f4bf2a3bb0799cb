// Test support (the loom_testing target): the small job the search tests plan in full in a second:
// a preset at 4 layers, sequence 256, global batch 16, on `gpus` GPUs of the default cluster.
#pragma once

#include <string>

#include "loom/api/job_options.h"

namespace loom::api::testing {

inline JobOptions small_search_job(const std::string& model, const std::string& policy, int gpus = 4) {
  api::JobOptions o;
  o.model = model;
  o.layers = 4;
  o.seq = 256;
  o.global_batch = 16;
  o.gpus = gpus;
  o.policy = policy;
  return o;
}

}  // namespace loom::api::testing
