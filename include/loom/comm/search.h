// The RVD layout search (SuperScaler §4): Dijkstra over layouts from the producer's to the consumer's.
//
// States are layouts in canonical form (layout.h), so a state is an RVD plus the devices that hold each
// piece. Edges: the intra-group rules on the state's own devices; from producer-side states, the
// inter-group rules onto the consumer's devices (SuperScaler's cross-graph edges); and from every state a
// plain p2p edge straight to the consumer layout, so a path always exists and the result is never
// slower than plain p2p from the producer. Weights: the cost model's step time plus 1 ns per step (2 ns
// for a p2p step), which breaks ties towards fewer primitives and towards collectives (on NVSwitch an
// all-gather and the equivalent sends cost the same under α-β).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "loom/cluster/cluster.h"
#include "loom/comm/cost_model.h"
#include "loom/comm/layout.h"
#include "loom/comm/step.h"

namespace loom::comm {

struct TransitionRequest {
  TensorSpec tensor;
  Layout producer;
  Layout consumer;
};

// Bounds the search: many devices with many factors make the state space explode (D(256,1) -> R(256) on
// 256 devices ran for minutes), so past the budget the search stops with the best path found so far.
struct SearchOptions {
  // Budget in states expanded (taken off the queue). Expanding a state costs about (its devices) x
  // (consumer devices), so a state counts max(1, ceil(that product / 256)): one state on up to 16 devices,
  // 16 on 64, 256 on 256. 20,000 then bounds any search to a few seconds on one core (about 5 s on 16
  // devices, 2-3 s on 64 or 256) while still solving e.g. D(32)->R(32) (3,521 states of weight 4).
  std::int64_t max_states = 20'000;
  // Whether every state may finish by a p2p step to the consumer. False: only collectives and local
  // steps (and the inter-group rules), the plain p2p baseline kept for when no such path reaches the
  // consumer within the budget; without the p2p edge a state's expansion costs about its collective
  // rules alone, so it counts one state whatever its devices. The materializer asks for this where the
  // search ran out of budget and would finish by sends between nodes (exec/layout_transition.cc).
  bool finish_by_p2p = true;
};

struct PlannedStep {
  Step step;
  Layout after;       // canonical
  double time = 0;    // seconds, from the cost model
};

struct TransitionPlan {
  std::vector<PlannedStep> steps;  // empty when producer and consumer already agree
  double time = 0;                 // Σ step times
  std::map<cluster::LinkKind, std::int64_t> bytes_per_tier;
  PlannedStep baseline;            // plain p2p from producer to consumer
  double baseline_time = 0;
  std::int64_t states_explored = 0;
  // The search ran out of SearchOptions::max_states: `steps` is the best path through the states it
  // expanded (at worst the p2p baseline), not proven the best plan.
  bool stopped_early = false;
};

// Errors: a tensor over ir::kMaxElements, invalid layouts, a layout that does not fit the tensor or the
// cluster. Never runs past options.max_states (see TransitionPlan::stopped_early).
Expected<TransitionPlan> search_transition(const TransitionRequest& request, const cluster::Cluster& cluster,
                                           const CommCostModel& cost, const SearchOptions& options = {});

// Plans shared by the threads of one process: a search's slices and its finalists (and the finalists
// planned two at a time) ask the same transitions of the same mesh, each ~0.1 s to search on 64 devices.
// A plan is a function of its key (the search is deterministic), so which thread stored it first changes
// no result. A miss searches outside the lock; two threads missing one key both search, the first plan
// stored is kept. Bounded: past `capacity` plans it starts again empty (a long-lived process, the Python
// bindings, plans many clusters).
class SharedTransitionCache {
 public:
  explicit SharedTransitionCache(std::size_t capacity = 20'000) : capacity_(capacity) {}
  Expected<TransitionPlan> find(const std::string& key, const TransitionRequest& request,
                                const cluster::Cluster& cluster, const CommCostModel& cost,
                                const SearchOptions& options);
  std::size_t size() const;

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::map<std::string, TransitionPlan> plans_;
};

// Remembers plans by (shape, dtype, producer, consumer, cluster and cost model), so repeated
// transitions of a plan (every layer's activation, every micro-batch) are searched once. With a
// `shared` cache a miss asks it before searching; size() and hits() stay this cache's own.
class TransitionCache {
 public:
  explicit TransitionCache(SharedTransitionCache* shared = nullptr) : shared_(shared) {}
  Expected<TransitionPlan> find(const TransitionRequest& request, const cluster::Cluster& cluster,
                                const CommCostModel& cost, const SearchOptions& options = {});
  std::size_t size() const { return plans_.size(); }
  std::int64_t hits() const { return hits_; }

 private:
  SharedTransitionCache* shared_;
  std::map<std::string, TransitionPlan> plans_;
  std::int64_t hits_ = 0;
};

}  // namespace loom::comm
