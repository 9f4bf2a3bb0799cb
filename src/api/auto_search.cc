#include "loom/api/auto_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>

#include "loom/api/auto_finalists.h"
#include "loom/api/oases_plan.h"
#include "loom/api/resolve_request.h"
#include "loom/api/search_facts.h"
#include "loom/cost/memory_model.h"
#include "loom/policy/plan_size.h"
#include "loom/search/analytic_cost.h"
#include "loom/search/progress_line.h"

namespace loom::api {
namespace {

// a beats b: fits where b does not, else faster (fitting) or smaller (neither fits).
bool better(const Job& a, const Job& b) {
  if (a.metrics.out_of_memory() != b.metrics.out_of_memory()) return !a.metrics.out_of_memory();
  if (!a.metrics.out_of_memory()) return a.metrics.step_time < b.metrics.step_time;
  return peak_bytes(a) < peak_bytes(b);
}

struct Priced {
  std::size_t index = 0;  // into the candidates
  search::Estimate estimate;
};

class Search {
 public:
  Search(const JobOptions& options, const Job& loaded, const std::vector<search::Candidate>& candidates,
         bool progress)
      : options_(options), loaded_(loaded), candidates_(candidates), line_(search::ProgressLine::for_stderr(progress)) {
    summary_.baseline = options.policy;
    summary_.candidates = static_cast<int>(candidates.size());
  }

  // Steps 2 and 3 (auto_search.h).
  Expected<void> measure_and_price() {
    line_.update({.phase = "measuring slices"});
    LOOM_ASSIGN_OR_RETURN(MeasuredFacts measured, measure_cost_facts(loaded_, candidates_));
    summary_.slices = measured.slices;
    forward_ops_ = measured.facts.forward_ops;
    LOOM_RETURN_IF_ERROR(price(measured));
    if (priced_.empty())
      return fail(fmt::format("{}: none of {} configurations could be priced; the first failed with: {}",
                              options_.policy, candidates_.size(), first_error_));
    return {};
  }
  const std::vector<std::optional<search::Estimate>>& estimates() const { return estimates_; }

  Expected<BaselineResult> run(bool baseline_rule) {
    LOOM_RETURN_IF_ERROR(measure_and_price());
    std::vector<std::size_t> order = finalists(baseline_rule);
    if (order.empty())
      return fail(fmt::format("{}: none of {} priced configurations can be planned in full (each explicit plan would "
                              "exceed Loom's sub-op limit and cannot be folded)",
                              options_.policy, summary_.priced),
                  "plan fewer GPUs (--gpus) or a smaller global batch, or use --policy auto (its megatron plans fold)");
    LOOM_RETURN_IF_ERROR(plan_finalists(order, baseline_rule));
    line_.finish();
    summary_.seconds = line_.elapsed_seconds();
    if (!best_)
      return fail(fmt::format("{}: none of {} finalists could be planned; the first failed with: {}", options_.policy,
                              summary_.finalists.size(), first_error_));
    explain_winner();
    BaselineResult result{.best = std::move(best_), .summary = std::move(summary_)};
    return result;
  }

 private:
  bool budget_spent() {
    if (options_.budget <= 0 || line_.elapsed_seconds() < options_.budget) return false;
    summary_.budget_spent = true;
    return true;
  }

  Expected<void> price(const MeasuredFacts& measured) {
    search::AnalyticCoster coster(measured.facts, loaded_.cluster);
    const std::set<search::ClassKey> failed(measured.failed.begin(), measured.failed.end());
    first_error_ = measured.first_error;
    estimates_.assign(candidates_.size(), std::nullopt);
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      if (!priced_.empty() && budget_spent()) break;  // at least one priced: always a plan to return
      if (failed.contains(search::class_of(candidates_[i]))) {
        ++summary_.failed;
        continue;
      }
      Expected<search::Estimate> e = coster.price(candidates_[i]);
      if (!e) {
        ++summary_.failed;
        if (first_error_.empty()) first_error_ = e.error().to_string();
        continue;
      }
      estimates_[i] = *e;
      priced_.push_back({i, *e});
      ++summary_.priced;
      if (i % 64 == 0)
        line_.update({.phase = "pricing", .done = static_cast<std::int64_t>(i), .total = summary_.candidates});
    }
    std::ranges::stable_sort(priced_,
                             [](const Priced& a, const Priced& b) { return search::better(a.estimate, b.estimate); });
    rank_.assign(candidates_.size(), 0);
    for (std::size_t r = 0; r < priced_.size(); ++r) rank_[priced_[r].index] = static_cast<int>(r) + 1;
    return {};
  }

  RankedSpace ranked_space() const {
    RankedSpace space{.candidates = candidates_, .estimates = estimates_, .ranked = {},
                      .gpus_per_node = loaded_.cluster.gpus_per_node};
    for (const Priced& p : priced_) space.ranked.push_back(p.index);
    return space;
  }

  std::vector<std::size_t> finalists(bool baseline_rule) {
    Finalists picked = pick_finalists(ranked_space(), baseline_rule);
    follows_recompute_ = std::move(picked.follows_recompute);
    return std::move(picked.order);
  }

  Expected<std::unique_ptr<Job>> plan_full(std::size_t i) const {
    const search::Candidate& c = candidates_[i];
    JobOptions o = with_config(options_, c.config);
    o.policy = c.policy;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, plan_job(o));
    job->description = fmt::format("{} -> {}", options_.policy, describe(c.policy, c.config));
    return job;
  }

  // Candidate i's finalist row as the costing priced it.
  FinalistRow analytic_row(std::size_t i) const {
    const search::Candidate& c = candidates_[i];
    const search::Estimate& e = *estimates_[i];
    return {.configuration = search::describe(c), .family = std::string(search::name(c.family)), .rank = rank_[i],
            .analytic_seconds = e.step_seconds, .analytic_peak = e.peak_bytes, .analytic_fits = e.fits,
            .analytic_pipeline = e.pipeline_seconds, .analytic_sync = e.sync_seconds,
            .analytic_optimizer = e.optimizer_seconds};
  }

  // Records candidate i's full plan; whether it fits.
  bool record(std::size_t i, Expected<std::unique_ptr<Job>> planned) {
    if (planned && !(*planned)->folded && !estimates_[i]->cheap)  // a folded or small job's fixed costs would inflate the rate
      seconds_per_plan_byte_ = std::max(seconds_per_plan_byte_, (*planned)->seconds.total / planned_bytes(i, **planned));
    return record_row(analytic_row(i), std::move(planned));
  }

  // Records a finalist's row and its full plan; whether it fits.
  bool record_row(FinalistRow row, Expected<std::unique_ptr<Job>> planned) {
    ++summary_.evaluated;
    bool fits = false;
    if (!planned) {
      ++summary_.failed;
      row.error = planned.error().to_string();
      if (first_error_.empty()) first_error_ = row.error;
    } else {
      Job& job = **planned;
      fill_full(row, job);
      fits = row.full_fits;
      if (!best_ || better(job, *best_)) {
        best_ = std::move(*planned);
        summary_.winner = static_cast<int>(summary_.finalists.size());
      }
    }
    summary_.finalists.push_back(std::move(row));
    line_.update({.phase = "planning finalists",
                  .done = summary_.evaluated,
                  .best = best_ ? fmt::format("{}: {:.3f} s{}",
                                              summary_.finalists[static_cast<std::size_t>(summary_.winner)].configuration,
                                              best_->metrics.step_time, best_->metrics.out_of_memory() ? " (OOM)" : "")
                                : std::string()});
    return fits;
  }

  // Plans the queue two at a time (both cores), recording in queue order; a baseline's finalist that does
  // not fit in full is followed by its next recomputation. Under a budget, an explicit plan whose time
  // cannot be predicted yet (no plan finished) is planned alone, so that it finishes first and gives the
  // rate the others are predicted by.
  void plan_queue(std::vector<std::size_t> queue) {
    for (std::size_t at = 0; at < queue.size();) {
      if (!summary_.finalists.empty() && budget_spent()) return;
      std::vector<std::size_t> pair;
      for (; at < queue.size() && pair.size() < 2; ++at) {
        const std::size_t i = queue[at];
        if (planned_.contains(i)) continue;
        if (!pair.empty() && (unpredictable(pair.front()) || unpredictable(i))) break;
        // While the early plan holds the second core, the others are planned one at a time beside it.
        if (!pair.empty() && early_pending_ && i != early_ && pair.front() != early_) break;
        planned_.insert(i);
        if (i == early_) early_pending_ = false;  // taken below, or dropped by the bound (its thread joins at the end)
        if (!bounded_out(i) && !over_budget(i)) pair.push_back(i);
      }
      if (pair.empty()) continue;
      std::vector<Expected<std::unique_ptr<Job>>> jobs;
      std::vector<std::size_t> fresh;  // positions in the pair to plan now (not the early plan)
      for (std::size_t k = 0; k < pair.size(); ++k) {
        jobs.emplace_back(fail("not planned"));
        if (pair[k] != early_) fresh.push_back(k);
      }
      {
        std::optional<std::jthread> second;
        if (fresh.size() == 2) second.emplace([&] { jobs[fresh[1]] = plan_full(pair[fresh[1]]); });
        if (!fresh.empty()) jobs[fresh[0]] = plan_full(pair[fresh[0]]);
      }
      for (std::size_t k = 0; k < pair.size(); ++k)
        if (pair[k] == early_) jobs[k] = take_early();
      for (std::size_t k = 0; k < pair.size(); ++k)
        if (!record(pair[k], std::move(jobs[k])) && follows_recompute_.contains(pair[k]))
          if (const std::optional<std::size_t> next = next_recompute(ranked_space(), pair[k])) {
            follows_recompute_.insert(*next);
            queue.insert(queue.begin() + static_cast<std::ptrdiff_t>(at), *next);
          }
    }
  }

  // The early finalist (auto_finalists.h), planned at once on the second core while the cheap finalists
  // queued before it are planned one at a time on the first. Its plan is taken when the queue reaches it,
  // so the rows, their order and the winner are the queue's alone. Not under a budget: the queue decides
  // there, by rate, what is planned at all.
  void start_early(const std::vector<std::size_t>& order) {
    if (options_.budget > 0) return;
    const std::optional<std::size_t> early = early_finalist(ranked_space(), order);
    if (!early) return;
    early_ = *early;
    early_pending_ = true;
    early_thread_.emplace([this, i = early_] { early_job_ = plan_full(i); });
  }

  Expected<std::unique_ptr<Job>> take_early() {
    early_thread_.reset();  // joins
    return std::exchange(early_job_, fail("taken"));
  }

  // A finalist slow to plan whose analytic step is no faster than the best fitting full step so far is
  // skipped (auto_search.h, step 4), with a row saying so.
  bool bounded_out(std::size_t i) {
    const search::Estimate& e = *estimates_[i];
    if (e.cheap || !best_ || best_->metrics.out_of_memory() || e.step_seconds < best_->metrics.step_time) return false;
    FinalistRow row = analytic_row(i);
    row.skipped = true;
    row.error = fmt::format("skipped: slow to plan in full ({} sub-ops, unfolded) and priced at {:.4f} s, no faster "
                            "than the {:.4f} s already planned",
                            e.explicit_sub_ops, e.step_seconds, best_->metrics.step_time);
    ++summary_.skipped;
    summary_.finalists.push_back(std::move(row));
    return true;
  }

  // The planning work of candidate i's explicit plan (policy::explicit_plan_bytes: its sub-ops, ZeRO's
  // weighing more by dp), which its planning time follows.
  double plan_bytes(std::size_t i) const {
    const policy::ParallelConfig& c = candidates_[i].config;
    return std::max(1.0, policy::explicit_plan_bytes(forward_ops_, c, c.micro_batches));
  }

  // The same work measured on candidate i's planned (explicit) job: its sub-ops at the estimate's bytes
  // per sub-op. Its seconds over this are the job's planning rate.
  double planned_bytes(std::size_t i, const Job& job) const {
    const policy::ParallelConfig& c = candidates_[i].config;
    const double per_sub_op = plan_bytes(i) / std::max(1.0, policy::explicit_sub_ops(forward_ops_, c, c.micro_batches));
    return std::max(1.0, static_cast<double>(job.plan.sub_ops.size()) * per_sub_op);
  }

  // Whether candidate i is a large explicit plan planned under a budget before any such plan's rate is known.
  bool unpredictable(std::size_t i) const {
    return options_.budget > 0 && !estimates_[i]->folds && !estimates_[i]->cheap && seconds_per_plan_byte_ == 0;
  }

  // Under a budget, an explicit plan predicted to end past it (its work at the slowest rate of the
  // explicit plans so far) is skipped, with a row saying so; the first finalist is always planned.
  bool over_budget(std::size_t i) {
    const search::Estimate& e = *estimates_[i];
    if (options_.budget <= 0 || e.folds || seconds_per_plan_byte_ == 0 || summary_.evaluated == 0) return false;
    const double predicted = seconds_per_plan_byte_ * plan_bytes(i);
    const double left = options_.budget - line_.elapsed_seconds();
    if (predicted <= left) return false;
    FinalistRow row = analytic_row(i);
    row.skipped = true;
    row.error = fmt::format("skipped: planning it in full ({} sub-ops, unfolded) would take about {:.0f} s at the "
                            "slowest rate of the explicit plans so far, over the {:.0f} s left of the {:.0f} s budget",
                            e.explicit_sub_ops, predicted, std::max(0.0, left), options_.budget);
    ++summary_.skipped;
    summary_.budget_spent = true;
    summary_.finalists.push_back(std::move(row));
    return true;
  }

  // The Oases planner's plan as one more finalist (auto_search.h, step 4): per-layer tp degrees chosen on
  // the best-ranked overlapped candidate without a pipeline that fits (the planner prices one stage, on a
  // preset's numbered layers). A uniform choice is that candidate's own plan, planned if it was not yet.
  void plan_oases_planner() {
    if (budget_spent() || plans_a_graph(options_) || count_layers(loaded_.graph) == 0) return;
    const auto base = std::ranges::find_if(priced_, [&](const Priced& p) {
      const search::Candidate& c = candidates_[p.index];
      return c.family == search::Family::megatron && c.config.pp == 1 && c.config.overlap == policy::Overlap::oases &&
             p.estimate.fits && p.estimate.plannable;
    });
    if (base == priced_.end()) return;
    const std::size_t i = base->index;
    JobOptions o = with_config(options_, candidates_[i].config);
    o.policy = "megatron";
    o.tp_layers = "auto";
    line_.update({.phase = "oases planner", .done = summary_.evaluated});
    const Expected<OasesLayerChoice> chosen = oases_layer_degrees(o);
    FinalistRow row = analytic_row(i);
    row.configuration += " tp layers auto";
    if (!chosen) {
      row.error = chosen.error().to_string();
      ++summary_.failed;
      summary_.finalists.push_back(std::move(row));
      return;
    }
    if (chosen->uniform) {
      plan_queue({i});  // nothing when it was planned already
      return;
    }
    row.configuration = fmt::format("{} tp layers {}", search::describe(candidates_[i]), chosen->spec);
    row.analytic_seconds = chosen->seconds;
    row.analytic_peak = chosen->bytes;
    row.analytic_fits = chosen->fits;
    row.analytic_pipeline = row.analytic_sync = row.analytic_optimizer = 0;  // the planner prices the step whole
    Expected<std::unique_ptr<Job>> job = plan_job(chosen->options);
    if (job)
      (*job)->description = fmt::format("{} -> {} (oases planner)", options_.policy,
                                        describe("megatron", (*job)->request.config));
    record_row(std::move(row), std::move(job));
  }

  Expected<void> plan_finalists(const std::vector<std::size_t>& order, bool baseline_rule) {
    start_early(order);
    plan_queue(order);
    early_thread_.reset();  // an early plan the bound dropped: its core is needed again
    if (!baseline_rule) plan_oases_planner();
    // No finalist fits in full, though priced to fit: the costing underestimated their memory, so a few
    // more, those priced smallest (ties: the better rank).
    std::vector<std::size_t> extra;
    if (!best_ || best_->metrics.out_of_memory()) {
      std::vector<Priced> by_peak = priced_;
      std::ranges::stable_sort(by_peak, {}, [](const Priced& p) { return p.estimate.peak_bytes; });
      for (const Priced& p : by_peak)
        if (static_cast<int>(extra.size()) < kFinalistsPerFamily && !planned_.contains(p.index) && p.estimate.plannable)
          extra.push_back(p.index);
    }
    plan_queue(extra);
    // None planned at all (a model whose ops refuse what the priced slices could not see, such as
    // UNet's batch norms refusing micro-batches): on down the ranking, in pairs, until one plans.
    for (std::size_t at = 0; !best_ && at < priced_.size() && !budget_spent();) {
      std::vector<std::size_t> next;
      for (; at < priced_.size() && next.size() < 2; ++at)
        if (!planned_.contains(priced_[at].index) && priced_[at].estimate.plannable) next.push_back(priced_[at].index);
      plan_queue(next);
    }
    return {};
  }

  void explain_winner() {
    const FinalistRow& w = summary_.finalists[static_cast<std::size_t>(summary_.winner)];
    const FinalistRow* runner = nullptr;
    for (std::size_t r = 0; r < summary_.finalists.size(); ++r) {
      const FinalistRow& row = summary_.finalists[r];
      if (static_cast<int>(r) == summary_.winner || !row.planned) continue;
      if (runner == nullptr || (row.full_fits && !runner->full_fits) ||
          (row.full_fits == runner->full_fits && row.full_seconds < runner->full_seconds))
        runner = &row;
    }
    if (!w.full_fits)
      summary_.why = fmt::format("no finalist fits in memory; {} needs the least ({})", w.configuration,
                                 cost::format_bytes(static_cast<double>(w.full_peak)));
    else if (runner == nullptr)
      summary_.why = fmt::format("{} is the only finalist planned", w.configuration);
    else if (!runner->full_fits)
      summary_.why = fmt::format("{} is the only finalist that fits in memory ({} of {})", w.configuration,
                                 cost::format_bytes(static_cast<double>(w.full_peak)),
                                 cost::format_bytes(static_cast<double>(loaded_.cluster.gpu.memory_bytes)));
    else
      summary_.why = fmt::format(
          "{} fits ({}) and is the fastest planned in full: {:.4g} s, {:.1f} % faster than {} ({:.4g} s)",
          w.configuration, cost::format_bytes(static_cast<double>(w.full_peak)), w.full_seconds,
          100 * (runner->full_seconds - w.full_seconds) / runner->full_seconds, runner->configuration,
          runner->full_seconds);
  }

  const JobOptions& options_;
  const Job& loaded_;
  const std::vector<search::Candidate>& candidates_;
  search::ProgressLine line_;
  SearchSummary summary_;
  std::vector<std::optional<search::Estimate>> estimates_;
  std::vector<Priced> priced_;
  std::vector<int> rank_;
  std::set<std::size_t> follows_recompute_;
  std::set<std::size_t> planned_;
  std::unique_ptr<Job> best_;
  std::string first_error_;
  std::int64_t forward_ops_ = 0;
  double seconds_per_plan_byte_ = 0;  // the slowest large explicit plan so far, per planned_bytes (0: none yet)
  // The early plan (start_early): its candidate, whether the queue has yet to reach it, its result, and
  // its thread, declared last so that it joins before the members it reads are destroyed.
  std::size_t early_ = SIZE_MAX;
  bool early_pending_ = false;
  Expected<std::unique_ptr<Job>> early_job_ = fail("not planned");
  std::optional<std::jthread> early_thread_;
};

}  // namespace

Expected<BaselineResult> search_candidates(const JobOptions& options, const Job& loaded,
                                           const std::vector<search::Candidate>& candidates, bool baseline_rule,
                                           bool progress) {
  return Search(options, loaded, candidates, progress).run(baseline_rule);
}

Expected<PricedSpace> price_space(const Job& loaded) {
  LOOM_ASSIGN_OR_RETURN(const search::SpaceFacts facts, space_facts(loaded));
  PricedSpace out{.candidates = search::enumerate_space(facts)};
  Search priced(loaded.options, loaded, out.candidates, false);
  LOOM_RETURN_IF_ERROR(priced.measure_and_price());
  out.estimates = priced.estimates();
  return out;
}

Expected<BaselineResult> auto_search(const JobOptions& options, bool progress) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> loaded, load_job(options));
  LOOM_ASSIGN_OR_RETURN(const search::SpaceFacts facts, space_facts(*loaded));
  std::vector<search::Candidate> space = search::enumerate_space(facts);
  const int space_size = static_cast<int>(space.size());
  LOOM_ASSIGN_OR_RETURN(const std::vector<search::Candidate> candidates,
                        constrain_space(*loaded, std::move(space), "auto's space"));
  if (candidates.empty())
    return fail(fmt::format("auto has no configuration of {} GPUs for a global batch of {}", facts.gpus,
                            facts.global_batch),
                "choose a global batch divisible by the data-parallel degrees (--global-batch)");
  return with_space(search_candidates(options, *loaded, candidates, false, progress), space_size);
}

}  // namespace loom::api
