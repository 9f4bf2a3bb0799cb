// The HTML report of a simulated step (DESIGN.md, "Cost model and simulator"): one self-contained file
// (inline CSS, script and SVG; nothing fetched), byte-identical for the same input (no timestamps, fixed
// number formats, times rounded to nanoseconds). It holds
//   - a summary table: model, cluster, policy, step time, throughput, MFU, peak memory, OOM, how the
//     simulation ran;
//   - a timeline: one lane per simulated device (one per device class when classes were simulated
//     once, labelled with the devices it stands for), each with a compute and a communication row;
//     events coloured by kind (forward, backward, optimizer, local, collective, send, recv), with their
//     names as tooltips. A lane over its share of `max_events` merges short events into one box per
//     window of the step (timeline_sample.h), so every part of the step shows, and the page says so;
//   - memory: each device's peak as a bar stacked by tensor role against the GPU's capacity, and the
//     memory-over-time curve of the device with the largest peak (memory_over_time.h);
//   - the per-device time breakdown: compute, exposed communication and idle as shares of the step.
// The page's script draws the charts from data embedded as JSON, then sets
// document.body.dataset.rendered = "ok"; an error while drawing sets it to "error: <message>".
#pragma once

#include <cstddef>
#include <string>

#include "loom/cost/memory_model.h"
#include "loom/exec/exec_plan.h"
#include "loom/exec/fold.h"
#include "loom/sim/metrics.h"
#include "loom/sim/report_labels.h"
#include "loom/sim/simulator.h"

namespace loom::sim {

struct HtmlOptions {
  std::size_t max_events = 20000;        // timeline boxes drawn, split evenly over the lanes (timeline_sample.h)
  std::size_t max_lanes = 64;            // timeline lanes drawn (the first groups); the page says so
  std::size_t max_bars = 512;            // devices in the bar charts (else one bar per group, or the first)
  std::size_t max_memory_points = 2000;  // points of the memory curve (downsample keeps its envelope)
};

// `sim`, `metrics` and `memory` must come from `exec` (memory = cost::memory_usage(exec)).
std::string html_report(const ReportLabels& labels, const exec::ExecPlan& exec, const SimResult& sim,
                        const StepMetrics& metrics, const cost::MemoryReport& memory, HtmlOptions options = {});
std::string html_report(const ReportLabels& labels, const exec::FoldedStep& folded, const SimResult& sim,
                        const StepMetrics& metrics, const cost::MemoryReport& memory, HtmlOptions options = {});

}  // namespace loom::sim
