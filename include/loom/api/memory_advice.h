// What to change when a plan does not fit: the options that cut the largest memory class at the peak of
// the device with the largest peak, named as the user writes them (the CLI's flags).
#pragma once

#include <string>

#include "loom/api/job.h"

namespace loom::api {

// "activations are the largest class at device 3's peak (21.3 GiB of 45.1 GiB): --recompute selective or
// full, a smaller --micro-batch-size, --sp with tp, or more --tp / --pp". Empty for a job that fits.
std::string memory_advice(const Job& job);

}  // namespace loom::api
