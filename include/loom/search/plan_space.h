// The space `auto` searches (DESIGN.md, "Search": device mesh and degrees, stages, micro-batches,
// schedules, memory feasibility), as plain data: one Candidate per configuration of the built-in
// policies, enumerated from a few facts of the job. It holds megatron-best's and deepspeed-best's grids
// (api/baseline_search.h) with every recomputation, so `auto` can never lose to them:
//   megatron  tp in {1, 2, 4, 8} inside a node (auto: also across nodes smaller than 8, as Oases' Table III
//             runs tp 8 over 4-GPU nodes), pp dividing the layers, dp the rest; micro-batch size 1-8;
//             1F1B, interleaved 1F1B with 2 chunks (layers divisible by 2 pp, micro-batches by pp),
//             ZB-H1 (pp > 1); sequence parallelism with tp where the model takes it; Oases' overlapped
//             tensor parallelism (policy/overlap.h) where that policy takes it: tp > 1, an even micro-batch
//             size (two sub-batches), 1F1B or GPipe with one chunk per device, micro-batches independent,
//             without sequence parallelism (as Oases runs it); recomputation none, selective or full.
//   zero      ZeRO data parallelism over every GPU (policy 'zero'): stage 1-3, micro-batch size 1-8,
//             recomputation none or full.
//   mixed     megatron with ZeRO over its dp ranks (dp > 1 and tp or pp > 1): stage 1-3, 1F1B,
//             recomputation none or full.
// A model whose micro-batches are not independent (SpaceFacts::micro_batching: batch norms) gets no
// micro-batching the policies would refuse: without a pipeline, the whole batch of each dp rank as one
// micro-batch (its size batch / dp, outside 1-8); pipelines only with GPipe (every forward first) where
// the model allows that, else none.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/policy/policy.h"

namespace loom::search {

enum class Family : std::uint8_t { megatron, zero, mixed };
std::string_view name(Family family);  // "megatron", "zero", "mixed"

struct Candidate {
  Family family = Family::megatron;
  std::string policy;              // the built-in policy it applies: "megatron" or "zero"
  policy::ParallelConfig config;   // degrees, micro-batches, schedule, chunks, sp, ZeRO, recompute
  std::int64_t micro_batch_size = 1;  // samples per micro-batch and dp rank
};

// How a model's micro-batches may be cut (plan::batch_coupling): freely; only where every forward of a
// stage runs before its first backward (GPipe; without a pipeline, one micro-batch); never (one micro-batch).
enum class MicroBatching : std::uint8_t { independent, forwards_first, whole_batch };

// What the space is enumerated from.
struct SpaceFacts {
  int gpus = 1;
  int gpus_per_node = 1;
  std::int64_t global_batch = 1;
  int layers = 0;  // transformer layers (0: none found; pipelines then cut by FLOPs)
  // Whether megatron's tp candidates of a degree take sequence parallelism (the model allows it).
  std::function<bool(int tp)> sequence_parallel = [](int) { return false; };
  MicroBatching micro_batching = MicroBatching::independent;
};

// Which families and which recomputations to enumerate (the baselines take subsets).
struct SpaceFilter {
  bool megatron = true;
  bool zero = true;
  bool mixed = true;
  bool zero_bubble = true;  // ZB-H1 candidates in the megatron family
  // GPipe pipelines for a model whose micro-batches need every forward first (Megatron-LM's and DeepSpeed's
  // pipelines are 1F1B: the baselines have none).
  bool gpipe = true;
  // Oases' overlap in the megatron family (Megatron-LM's and DeepSpeed's grids have none).
  bool overlap = true;
  // tp up to 8 also where a node holds fewer GPUs, the tp group spanning nodes (Megatron-LM keeps tp
  // inside a node; Oases' overlap hides much of the slower links' cost, Table III: tp 8 on 4-GPU nodes).
  bool tp_across_nodes = true;
};

// Whether the megatron policy takes Oases' overlap (policy::oases_megatron) for a configuration of
// `micro_batch_size` samples per micro-batch and dp rank, on a model whose micro-batches are independent
// (a model coupling its batch cannot split it into sub-batches either).
bool takes_overlap(const policy::ParallelConfig& config, std::int64_t micro_batch_size);

// Whether the baselines' grids hold a configuration of their families: tp inside a node of
// `gpus_per_node` GPUs (0: any tp), no zero-bubble or GPipe pipeline, no Oases overlap.
bool in_baseline_grids(const policy::ParallelConfig& config, int gpus_per_node);

// Every candidate, in a fixed order (family, tp, pp, micro-batch size, schedule, overlap, ZeRO, recompute).
std::vector<Candidate> enumerate_space(const SpaceFacts& facts, const SpaceFilter& filter = {});

// "megatron dp 8 tp 8 pp 16 mbs 2 m 6 1f1b sp oases recompute selective" — a candidate in one line.
std::string describe(const Candidate& candidate);

}  // namespace loom::search
