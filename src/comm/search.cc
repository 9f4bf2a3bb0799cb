#include "loom/comm/search.h"

#include <algorithm>
#include <optional>
#include <queue>

#include "loom/comm/inter_rules.h"
#include "loom/comm/intra_rules.h"
#include "loom/comm/p2p_fetch.h"

namespace loom::comm {
namespace {

// Seconds added per step while searching, never reported: among equally fast paths prefer fewer steps,
// and a library collective to the same data moved by sends (SuperScaler §4: collectives "often
// outperform" send/recv, a difference the α-β model does not see), so p2p counts double.
constexpr double kStepTieBreak = 1e-9;
double tie_break(const Step& step) { return step.primitive == Primitive::p2p ? 2 * kStepTieBreak : kStepTieBreak; }

struct Node {
  Layout layout;
  double distance = 0;
  std::optional<std::size_t> parent;
  std::optional<Step> via;  // the step from the parent
  bool done = false;
};

class Dijkstra {
 public:
  Dijkstra(const TransitionRequest& request, const cluster::Cluster& cluster, const CommCostModel& cost,
           const SearchOptions& options)
      : request_(request), cluster_(cluster), cost_(cost), options_(options) {}

  // nullopt when the budget ran out before the goal was reached.
  std::optional<TransitionPlan> run(const Layout& start, const Layout& goal) {
    const std::vector<int> producer_devices = device_set(start);
    const std::vector<int> consumer_devices = device_set(goal);
    const bool inter = producer_devices != consumer_devices;
    reach(start, 0, std::nullopt, std::nullopt);
    std::optional<std::size_t> goal_index;
    while (!queue_.empty()) {
      const auto [distance, index] = queue_.top();
      queue_.pop();
      if (nodes_[index].done || distance > nodes_[index].distance) continue;
      nodes_[index].done = true;
      ++explored_;
      const Layout here = nodes_[index].layout;
      if (here == goal) {
        goal_index = index;
        break;
      }
      // Weighted by the work of an expansion (SearchOptions): the p2p edge pairs every target with holders.
      const auto pairs = static_cast<std::int64_t>(here.devices.size() * goal.devices.size());
      budget_used_ += options_.finish_by_p2p ? std::max<std::int64_t>(1, (pairs + 255) / 256) : 1;
      if (budget_used_ > options_.max_states) break;
      for (Transition& t : intra_transitions(here, request_.tensor)) relax(index, std::move(t));
      if (inter && device_set(here) == producer_devices)
        for (Transition& t : inter_transitions(here, request_.tensor, goal.devices, cluster_)) relax(index, std::move(t));
      if (options_.finish_by_p2p) relax(index, Transition{goal, p2p_fetch(here, goal, request_.tensor, cluster_)});
    }
    // The p2p edge from every state keeps the goal reachable, so only the budget (or finish_by_p2p
    // false) ends without it. Out of budget, the goal still holds the best path through the states
    // expanded so far (the start's own edges included, e.g. a direct all-reduce): good, though not
    // proven best.
    if (goal_index) return plan_to(*goal_index);
    if (const auto it = index_.find(goal); it != index_.end()) {
      TransitionPlan plan = plan_to(it->second);
      plan.stopped_early = true;
      return plan;
    }
    return std::nullopt;
  }

  std::int64_t explored() const { return explored_; }

 private:
  void reach(const Layout& layout, double distance, std::optional<std::size_t> parent, std::optional<Step> via) {
    auto [it, inserted] = index_.try_emplace(layout, nodes_.size());
    if (inserted) nodes_.push_back(Node{layout, distance, parent, std::move(via), false});
    else if (distance < nodes_[it->second].distance && !nodes_[it->second].done)
      nodes_[it->second] = Node{layout, distance, parent, std::move(via), false};
    else return;
    queue_.emplace(distance, it->second);
  }

  void relax(std::size_t from, Transition t) {
    const double weight = cost_.step_time(t.step) + tie_break(t.step);
    reach(canonical(t.after), nodes_[from].distance + weight, from, std::move(t.step));
  }

  TransitionPlan plan_to(std::size_t goal_index) {
    TransitionPlan plan;
    for (std::optional<std::size_t> i = goal_index; nodes_[*i].parent; i = nodes_[*i].parent) {
      const Node& n = nodes_[*i];
      plan.steps.push_back(PlannedStep{*n.via, n.layout, cost_.step_time(*n.via)});
    }
    std::ranges::reverse(plan.steps);
    for (const PlannedStep& s : plan.steps) {
      plan.time += s.time;
      for (const auto& [tier, bytes] : bytes_per_tier(s.step, cluster_)) plan.bytes_per_tier[tier] += bytes;
    }
    plan.states_explored = explored_;
    return plan;
  }

  const TransitionRequest& request_;
  const cluster::Cluster& cluster_;
  const CommCostModel& cost_;
  const SearchOptions& options_;
  std::vector<Node> nodes_;
  std::map<Layout, std::size_t> index_;
  using Entry = std::pair<double, std::size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue_;
  std::int64_t explored_ = 0;
  std::int64_t budget_used_ = 0;  // weighted states (SearchOptions::max_states)
};

}  // namespace

Expected<TransitionPlan> search_transition(const TransitionRequest& request, const cluster::Cluster& cluster,
                                           const CommCostModel& cost, const SearchOptions& options) {
  // Byte counts are int64 products of the shape: keep them far from overflow.
  if (!request.tensor.shape.within_limits())
    return fail(fmt::format("tensor {}: sizes must be positive, with at most 2^48 elements (Loom's limit)",
                            request.tensor.shape.to_string()));
  LOOM_RETURN_IF_ERROR(with_context(validate(request.producer, request.tensor, cluster), "producer"));
  LOOM_RETURN_IF_ERROR(with_context(validate(request.consumer, request.tensor, cluster), "consumer"));
  const Layout start = canonical(request.producer);
  const Layout goal = canonical(request.consumer);
  Dijkstra search(request, cluster, cost, options);
  std::optional<TransitionPlan> found = search.run(start, goal);
  Step baseline = p2p_fetch(start, goal, request.tensor, cluster);
  const double baseline_time = cost.step_time(baseline);
  PlannedStep baseline_step{std::move(baseline), goal, baseline_time};
  TransitionPlan plan;
  if (found && (!found->stopped_early || found->time < baseline_time)) {
    plan = std::move(*found);
  } else {  // out of budget with nothing better: plain p2p is always a valid plan
    plan.steps = {baseline_step};
    plan.time = baseline_time;
    plan.bytes_per_tier = bytes_per_tier(baseline_step.step, cluster);
    plan.states_explored = search.explored();
    plan.stopped_early = true;
  }
  plan.baseline_time = baseline_time;
  plan.baseline = std::move(baseline_step);
  return plan;
}

Expected<TransitionPlan> SharedTransitionCache::find(const std::string& key, const TransitionRequest& request,
                                                     const cluster::Cluster& cluster, const CommCostModel& cost,
                                                     const SearchOptions& options) {
  {
    const std::lock_guard lock(mutex_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
  }
  LOOM_ASSIGN_OR_RETURN(TransitionPlan plan, search_transition(request, cluster, cost, options));
  const std::lock_guard lock(mutex_);
  if (plans_.size() >= capacity_) plans_.clear();
  return plans_.emplace(key, std::move(plan)).first->second;
}

std::size_t SharedTransitionCache::size() const {
  const std::lock_guard lock(mutex_);
  return plans_.size();
}

Expected<TransitionPlan> TransitionCache::find(const TransitionRequest& request, const cluster::Cluster& cluster,
                                               const CommCostModel& cost, const SearchOptions& options) {
  LOOM_RETURN_IF_ERROR(with_context(validate(request.producer, request.tensor, cluster), "producer"));
  LOOM_RETURN_IF_ERROR(with_context(validate(request.consumer, request.tensor, cluster), "consumer"));
  std::string key = fmt::format("{} {} {} {} | {} {} | {} | {}{}", request.tensor.shape.to_string(),
                                ir::name(request.tensor.dtype), to_string(canonical(request.producer)),
                                to_string(canonical(request.consumer)), cluster.name, cluster.device_count(),
                                cost.fingerprint(), options.max_states, options.finish_by_p2p ? "" : " collectives");
  if (auto it = plans_.find(key); it != plans_.end()) {
    ++hits_;
    return it->second;
  }
  if (shared_ != nullptr) {
    // Across materializations the search's own cluster may differ where the key's name and size agree
    // (a cost model over another cluster): its links and NICs join the shared key.
    const std::string shared_key = key + " | " + AlphaBetaCostModel(cluster).fingerprint();
    LOOM_ASSIGN_OR_RETURN(TransitionPlan plan, shared_->find(shared_key, request, cluster, cost, options));
    return plans_.emplace(std::move(key), std::move(plan)).first->second;
  }
  LOOM_ASSIGN_OR_RETURN(TransitionPlan plan, search_transition(request, cluster, cost, options));
  return plans_.emplace(std::move(key), std::move(plan)).first->second;
}

}  // namespace loom::comm
