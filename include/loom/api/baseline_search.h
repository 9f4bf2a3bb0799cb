// The baselines of the papers' evaluations (nnScaler §6, Rhino §7): the best plan each system's own space
// holds, found as its authors tune it by grid search, each candidate priced by Loom's analytic costing and
// the best few planned and simulated in full (auto_search.h says how the finalists are chosen).
//   megatron-best   Megatron-LM: tp in {1, 2, 4, 8} inside a node, pp over whole layers, dp the rest;
//                   micro-batch size 1-8; 1F1B, interleaved with 2 chunks where the layers allow;
//                   sequence parallelism with tp where the model takes it (not Swin's images);
//                   recomputation off, else selective, else full (as Megatron users turn it on only
//                   when memory demands).
//   deepspeed-best  DeepSpeed ZeRO data parallelism over every GPU: ZeRO stage 1-3, micro-batch size
//                   1-8 (gradient accumulation for the rest of the global batch), recomputation off or full.
// The fastest finalist that fits in memory wins (ties: the better analytic rank); when none fits, the one
// with the smallest peak memory, reported as OOM.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/api/job.h"
#include "loom/search/plan_space.h"

namespace loom::api {

bool is_baseline(std::string_view policy);  // "megatron-best", "deepspeed-best"
bool is_search(std::string_view policy);    // a baseline or "auto": the search picks the degrees

// A configuration of a built-in policy ("megatron", "zero") with its family and micro-batch size.
using BaselineCandidate = search::Candidate;

// The candidates of a job loaded with a baseline as its policy (load_job), in enumeration order, every
// recomputation of each: its cluster, its GPU count (the resolved --gpus) and its model's global batch
// and layers.
// Errors: a job whose policy is not a baseline, a GPU count with no candidate.
Expected<std::vector<BaselineCandidate>> baseline_candidates(const Job& loaded);

// One finalist of a search, as --explain prints it.
struct FinalistRow {
  std::string configuration;  // search::describe
  std::string family;         // "megatron", "zero", "mixed"
  int rank = 0;               // in the analytic ranking, from 1
  double analytic_seconds = 0;
  std::int64_t analytic_peak = 0;
  bool analytic_fits = true;
  // Where the analytic step goes (search::Estimate): forward and backward of every micro-batch with the
  // bubble, exposed dp / ZeRO communication, optimizer.
  double analytic_pipeline = 0;
  double analytic_sync = 0;
  double analytic_optimizer = 0;
  bool planned = false;       // planned in full (false: its plan failed or it was skipped, error says why)
  bool skipped = false;       // slow to plan and bounded out by a faster full plan (auto_search.h, step 4)
  double full_seconds = 0;
  std::int64_t full_peak = 0;
  bool full_fits = false;
  // Where the full step goes on the busiest device, the one with the least idle time (sim::DeviceMetrics).
  double full_compute = 0;
  double full_exposed_communication = 0;
  double full_idle = 0;
  std::string error;
};

// The largest peak of the job's devices (0: none simulated).
std::int64_t peak_bytes(const Job& job);

// Fills a finalist row's numbers of its full plan (`job`, simulated): planned, step, peak, fits, and where
// the busiest device's step goes.
void fill_full(FinalistRow& row, const Job& job);

struct SearchSummary {
  std::string baseline;  // the search: "auto", "megatron-best", "deepspeed-best"
  int candidates = 0;    // enumerated (within the constraint file, when one is given)
  std::string constraints;  // the constraint file (options.constraints); "": none
  int space = 0;            // enumerated before the constraint file narrowed them (0: no file)
  int evaluated = 0;     // planned in full (the finalists)
  int failed = 0;        // candidates the policy could not apply (a slice or a finalist that failed)
  int skipped = 0;       // finalists slow to plan in full, skipped by the bound (auto_search.h, step 4)
  int priced = 0;        // priced analytically
  int slices = 0;        // classes measured (search_facts.h)
  double seconds = 0;    // wall-clock of the whole search (never written into files)
  bool budget_spent = false;
  std::vector<FinalistRow> finalists;  // in planning order
  int winner = -1;                     // index into finalists
  std::string why;                     // why the winner wins, one sentence
};
struct BaselineResult {
  std::unique_ptr<Job> best;  // its description names the baseline and the configuration it chose
  SearchSummary summary;
};

// Prices every candidate of `options.policy` (a baseline), plans its finalists and keeps the best.
// `progress`: a live line on stderr.
Expected<BaselineResult> best_baseline(const JobOptions& options, bool progress = false);

// The job of a built-in policy (plan_job), or of a search (auto or a baseline), whose summary `search`
// receives; `progress`: the search's live line on stderr.
Expected<std::unique_ptr<Job>> plan_or_search(const JobOptions& options, std::optional<SearchSummary>* search = nullptr,
                                              bool progress = false);

}  // namespace loom::api
