// The plain-text summary of a simulated step for the command line: the headline numbers, then one row
// per group of devices sharing their times (device_groups.h). Deterministic: fixed number formats.
//
//   gpt3-13b on dgx-a100x8, policy megatron dp=8 tp=8
//     step time      1.234 s
//     throughput     51.87 samples/s, 106.21K tokens/s
//     MFU            45.2 % (7.86 PFLOP a step; bf16 peak 312.00 TFLOP/s x 64 GPUs)
//     peak memory    61.20 GiB on device 3, of 80.00 GiB
//     out of memory  no
//     simulated      2 of 64 devices, one per device class
//
//     devices  compute         exposed comm    idle            peak memory
//     0-7      0.987 s  80.0%  0.152 s  12.3%  0.094 s   7.6%  61.20 GiB
#pragma once

#include <string>

#include "loom/sim/metrics.h"
#include "loom/sim/report_labels.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

// At most `max_rows` group rows, then a line saying how many more.
std::string summary_table(const ReportLabels& labels, const SimResult& sim, const StepMetrics& metrics,
                          std::size_t max_rows = 32);

// "1.234 s", "12.35 ms", "850.0 us" (three significant decimals at the scale of the value).
std::string format_seconds(double seconds);

}  // namespace loom::sim
