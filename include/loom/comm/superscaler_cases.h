// The 18 inter-RVD cases of SuperScaler's Table 3, shared by the tests and bench/bench_rvd_search.cc:
// producers R(i)/V(i)/D(i) on the first i GPUs of server 1, consumers R(j)/D(j) on the first j GPUs of
// server 2 (devices 8..), i→j ∈ {8→8, 8→4, 4→8}, a 1-D tensor.
#pragma once

#include <string>
#include <vector>

#include "loom/comm/search.h"

namespace loom::comm {

struct NamedRequest {
  std::string name;  // "R(8)->D(4)"
  TransitionRequest request;
};

// `gpus_per_server` is where server 2 starts (8 on v100x8x2).
std::vector<NamedRequest> superscaler_table3_cases(const TensorSpec& tensor, int gpus_per_server = 8);

}  // namespace loom::comm
