// Shared by the api tests of per-layer degrees and the Oases planner: BERT-1.3B layers on one tp group of 4
// RTX 3090s (NVLink pairs), fp16, full recompute, Oases' overlap, a batch of 16.
#pragma once

#include <string>
#include <utility>

#include "loom/api/job_options.h"

namespace loom::api::testing {

inline JobOptions bert_group(int layers, std::string tp_layers) {
  JobOptions o;
  o.model = "bert-1.3b";
  o.layers = layers;
  o.cluster = "rtx3090-nvlinkx8";
  o.gpus = 4;
  o.tp = 4;
  o.global_batch = 16;
  o.dtype = ir::DType::f16;
  o.recompute = policy::Recompute::full;
  o.overlap = policy::Overlap::oases;
  o.tp_layers = std::move(tp_layers);
  return o;
}

}  // namespace loom::api::testing
