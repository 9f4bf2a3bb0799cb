#include "loom/api/baseline_search.h"

#include <fmt/format.h>

#include <functional>
#include <set>
#include <string_view>

#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"

namespace loom::api {
namespace {

constexpr int kMicroBatchSizes[] = {1, 2, 4, 8};

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The transformer layers of a graph (distinct numbered layer names of forward ops, policy/stages.h); 0
// when the model has none.
int count_layers(const ir::Graph& graph) {
  std::set<std::string_view> layers;
  for (const ir::Op& op : graph.ops)
    if (const std::string_view layer = policy::layer_of(op.name); op.pass == ir::Pass::forward && !layer.empty())
      layers.insert(layer);
  return static_cast<int>(layers.size());
}

// Whether Megatron's tp candidates of degree `tp` take sequence parallelism: yes, unless the policy
// refuses it where it accepts tp alone (a model where no op carries a sequence, such as Swin's images, or
// a sequence tp does not divide). Decided from the two layouts, not from the refusal's text; where tp
// alone is refused too, sp stays on and the candidate fails as it would anyway.
bool takes_sequence_parallel(const plan::Plan& fresh, int tp) {
  return policy::tensor_parallel_layout(fresh, tp, true).has_value() ||
         !policy::tensor_parallel_layout(fresh, tp, false).has_value();
}

// Megatron's space, recomputation left at none (best_baseline adds it where memory demands). Like
// Megatron-LM, a pipeline holds whole layers: pp (times the chunks) divides the layer count.
// `sequence_parallel(tp)`: whether tp candidates of that degree take sequence parallelism.
std::vector<BaselineCandidate> megatron_space(int gpus, int gpus_per_node, std::int64_t batch, int layers,
                                              const std::function<bool(int)>& sequence_parallel) {
  std::vector<BaselineCandidate> out;
  for (int tp : {1, 2, 4, 8}) {
    if (tp > gpus_per_node || gpus % tp != 0) continue;
    const bool sp = tp > 1 && sequence_parallel(tp);
    for (int pp : divisors(gpus / tp)) {
      if (pp > 1 && layers > 0 && layers % pp != 0) continue;
      const int dp = gpus / (tp * pp);
      for (int mbs : kMicroBatchSizes) {
        if (batch % (std::int64_t{dp} * mbs) != 0) continue;
        const auto micro_batches = static_cast<int>(batch / (std::int64_t{dp} * mbs));
        if (pp > 1 && micro_batches < pp) continue;  // a pipeline needs at least pp micro-batches
        for (int chunks : {1, 2}) {
          if (chunks > 1 && (pp == 1 || micro_batches % pp != 0 || (layers > 0 && layers % (pp * chunks) != 0))) continue;
          policy::ParallelConfig c{.dp = dp, .tp = tp, .pp = pp, .micro_batches = micro_batches};
          c.virtual_stages = chunks;
          c.sequence_parallel = sp;
          out.push_back({"megatron", c});
        }
      }
    }
  }
  return out;
}

std::vector<BaselineCandidate> deepspeed_space(int gpus, std::int64_t batch) {
  std::vector<BaselineCandidate> out;
  for (int stage : {1, 2, 3})
    for (int mbs : kMicroBatchSizes) {
      if (batch % (std::int64_t{gpus} * mbs) != 0) continue;
      policy::ParallelConfig c{.dp = gpus, .micro_batches = static_cast<int>(batch / (std::int64_t{gpus} * mbs))};
      c.zero = stage;
      out.push_back({"zero", c});
    }
  return out;
}

std::string describe_choice(const std::string& baseline, const BaselineCandidate& c) {
  return fmt::format("{} -> {}", baseline, describe(c.policy, c.config));
}

std::int64_t peak_of(const Job& r) {
  const sim::StepMetrics& m = r.metrics;
  return m.max_memory_device < 0 ? 0 : m.per_device[static_cast<std::size_t>(m.max_memory_device)].peak_bytes;
}

// a beats b: fits where b does not, else faster (fitting) or smaller (neither fits).
bool better(const Job& a, const Job& b) {
  if (a.metrics.out_of_memory() != b.metrics.out_of_memory()) return !a.metrics.out_of_memory();
  if (!a.metrics.out_of_memory()) return a.metrics.step_time < b.metrics.step_time;
  return peak_of(a) < peak_of(b);
}

}  // namespace

bool is_baseline(std::string_view policy) { return policy == "megatron-best" || policy == "deepspeed-best"; }

Expected<std::vector<BaselineCandidate>> baseline_candidates(const Job& loaded) {
  const std::string& baseline = loaded.options.policy;
  if (!is_baseline(baseline))
    return fail(fmt::format("unknown baseline '{}'", baseline), "use megatron-best or deepspeed-best");
  const int gpus = loaded.request.gpus;
  const std::int64_t batch = std::max<std::int64_t>(1, static_cast<std::int64_t>(loaded.workload.samples_per_step));
  std::vector<BaselineCandidate> out;
  if (baseline == "megatron-best") {
    LOOM_ASSIGN_OR_RETURN(const plan::Plan fresh, plan::make_plan(loaded.graph, loaded.catalog));
    out = megatron_space(gpus, loaded.cluster.gpus_per_node, batch, count_layers(loaded.graph),
                         [&](int tp) { return takes_sequence_parallel(fresh, tp); });
  } else {
    out = deepspeed_space(gpus, batch);
  }
  if (out.empty())
    return fail(fmt::format("{} has no configuration of {} GPUs for a global batch of {}", baseline, gpus, batch),
                "choose a global batch divisible by the data-parallel degrees (--global-batch)");
  return out;
}

Expected<BaselineResult> best_baseline(const JobOptions& options) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<Job> loaded, load_job(options));
  LOOM_ASSIGN_OR_RETURN(std::vector<BaselineCandidate> candidates, baseline_candidates(*loaded));
  const std::string& baseline = options.policy;
  const std::vector<policy::Recompute> recomputes =
      baseline == "megatron-best"
          ? std::vector{policy::Recompute::none, policy::Recompute::selective, policy::Recompute::full}
          : std::vector{policy::Recompute::none, policy::Recompute::full};
  BaselineResult result;
  result.summary.baseline = baseline;
  result.summary.candidates = static_cast<int>(candidates.size());
  std::string first_error;
  for (BaselineCandidate candidate : candidates) {
    for (policy::Recompute recompute : recomputes) {
      candidate.config.recompute = recompute;
      JobOptions o = with_config(options, candidate.config);
      o.policy = candidate.policy;
      Expected<std::unique_ptr<Job>> planned = plan_job(o);
      ++result.summary.evaluated;
      if (!planned) {
        ++result.summary.failed;
        if (first_error.empty()) first_error = planned.error().to_string();
        break;  // the shapes do not divide: recomputation will not change that
      }
      (*planned)->description = describe_choice(baseline, candidate);
      const bool fits = !(*planned)->metrics.out_of_memory();
      if (!result.best || better(**planned, *result.best)) result.best = std::move(*planned);
      if (fits) break;  // recomputation only where memory demands it
    }
  }
  if (!result.best)
    return fail(fmt::format("{}: none of {} configurations could be planned; the first failed with: {}", baseline,
                            result.summary.candidates, first_error));
  return result;
}

Expected<std::unique_ptr<Job>> plan_or_search(const JobOptions& options, std::optional<SearchSummary>* search) {
  if (!is_baseline(options.policy)) return plan_job(options);
  LOOM_ASSIGN_OR_RETURN(BaselineResult searched, best_baseline(options));
  if (search != nullptr) *search = searched.summary;
  return std::move(searched.best);
}

}  // namespace loom::api
