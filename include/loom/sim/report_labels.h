// What a report says about its inputs, as the caller names them (the `loom plan` command: the model
// preset, the cluster, the policy with its degrees).
#pragma once

#include <string>

namespace loom::sim {

struct ReportLabels {
  std::string model;    // "gpt3-13b"
  std::string cluster;  // "dgx-a100x8"
  std::string policy;   // "megatron dp=8 tp=8", as given
};

}  // namespace loom::sim
