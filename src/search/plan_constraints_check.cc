// Binding constraints to a job and checking configurations against them (plan_constraints.h).
#include <numeric>
#include <set>

#include "loom/core/strings.h"
#include "loom/policy/policy.h"
#include "loom/policy/tensor_parallel.h"
#include "loom/search/plan_constraints.h"

namespace loom::search {
namespace {

constexpr std::string_view kDoc = "see docs/constraints.md";

template <class T>
std::string list(const std::vector<T>& values) {
  std::vector<std::string> texts;
  for (const T& v : values) texts.push_back(fmt::format("{}", v));
  return fmt::format("[{}]", join(texts, ", "));
}

std::string schedule_name(const policy::ParallelConfig& c) {
  return c.virtual_stages > 1 ? "interleaved" : std::string(plan::name(c.schedule));
}

template <class T>
void check(const Allowed<T>& allowed, const T& value, std::string_view what, std::vector<Violation>& out) {
  if (!allowed.allows(value))
    out.push_back({allowed.entry, fmt::format("{} {} is not in {}", what, value, list(allowed.values))});
}

std::unexpected<Error> conflict(const PlanConstraints& c, const EntryName& a, const EntryName& b, std::string_view why) {
  return fail(fmt::format("constraints file '{}': entries {} and {} conflict: {}", c.source, to_string(a), to_string(b), why),
              fmt::format("widen or remove one of the two entries; {}", kDoc));
}

std::unexpected<Error> against_gpus(const PlanConstraints& c, const EntryName& a, int gpus, std::string_view why) {
  return fail(fmt::format("constraints file '{}': entry {} conflicts with the job's {} GPUs (--gpus): {}", c.source,
                          to_string(a), gpus, why),
              fmt::format("widen the entry, or plan another GPU count; {}", kDoc));
}

}  // namespace

ConstraintChecker::ConstraintChecker(PlanConstraints constraints, const ir::Graph& graph, plan::Plan fresh,
                                     const ir::OpCatalog& catalog, int gpus)
    : constraints_(std::move(constraints)), graph_(&graph), fresh_(std::move(fresh)), catalog_(&catalog), gpus_(gpus) {}

Expected<ConstraintChecker> ConstraintChecker::bind(PlanConstraints constraints, const ir::Graph& graph,
                                                    const ir::OpCatalog& catalog, int gpus) {
  LOOM_ASSIGN_OR_RETURN(plan::Plan fresh, plan::make_plan(graph, catalog));
  ConstraintChecker checker(std::move(constraints), graph, std::move(fresh), catalog, gpus);
  const PlanConstraints& c = checker.constraints_;
  std::string example_name, example_type;
  for (const ir::Op& op : graph.ops)
    if (op.pass == ir::Pass::forward && (example_name.empty() || op.name.find('.') != std::string::npos)) {
      example_name = op.name;
      example_type = op.type;
      if (op.name.find('.') != std::string::npos) break;
    }
  const auto covered = [&](const EntryName& entry, const std::vector<OpPattern>& patterns) -> Expected<std::vector<ir::OpId>> {
    std::vector<ir::OpId> ops;
    for (const ir::Op& op : graph.ops)
      if (op.pass == ir::Pass::forward &&
          std::ranges::any_of(patterns, [&](const OpPattern& p) { return matches(p, op); }))
        ops.push_back(op.id);
    if (ops.empty()) {
      std::vector<std::string> texts;
      for (const OpPattern& p : patterns) texts.push_back(fmt::format("{}'{}'", p.type ? "type " : "", p.text));
      return fail(fmt::format("constraints file '{}': entry {}: {} matches no forward op of the model", c.source,
                              to_string(entry), join(texts, ", ")),
                  fmt::format("op names look like '{}' and types like '{}' (`loom graph --text` lists them); {}",
                              example_name, example_type, kDoc));
    }
    return ops;
  };
  for (const PartitionRule& rule : c.partition) {
    LOOM_ASSIGN_OR_RETURN(std::vector<ir::OpId> ops, covered(rule.entry, rule.ops));
    std::set<std::string> identifiers;
    for (ir::OpId op : ops)
      for (const std::string& id : checker.fresh_.layouts[op.index()].annotation.identifiers()) identifiers.insert(id);
    for (const std::string& dim : rule.dims)
      if (!identifiers.contains(dim))
        return fail(fmt::format("constraints file '{}': entry {}: no op it matches has the identifier '{}'", c.source,
                                to_string(rule.entry), dim),
                    fmt::format("their annotations name {}; `loom ops` prints each type's annotation; {}",
                                join(std::vector<std::string>(identifiers.begin(), identifiers.end()), ", "), kDoc));
    checker.partition_ops_.push_back(std::move(ops));
  }
  for (const ReplicateRule& rule : c.replicate) {
    LOOM_ASSIGN_OR_RETURN(std::vector<ir::OpId> ops, covered(rule.entry, rule.ops));
    checker.replicate_ops_.push_back(std::move(ops));
  }
  for (const PlacementRule& rule : c.placement) {
    LOOM_ASSIGN_OR_RETURN(std::vector<ir::OpId> ops, covered(rule.entry, {rule.ops}));
    checker.placement_ops_.push_back(std::move(ops));
  }
  LOOM_RETURN_IF_ERROR(checker.check_static());
  return checker;
}

// Contradictions that hold whatever the configuration, each naming both sides.
Expected<void> ConstraintChecker::check_static() const {
  const PlanConstraints& c = constraints_;
  using Degree = std::pair<const Allowed<int>*, std::string_view>;
  for (const auto& [degree, name] : {Degree{&c.dp, "dp"}, Degree{&c.tp, "tp"}, Degree{&c.pp, "pp"}})
    if (degree->given() && std::ranges::none_of(degree->values, [&](int v) { return gpus_ % v == 0; }))
      return against_gpus(c, degree->entry, gpus_, fmt::format("no {} in {} divides {}", name, list(degree->values), gpus_));
  if (c.stages.given()) {
    const int stages = c.stages.values.front();
    if (!c.pp.allows(stages))
      return conflict(c, c.stages.entry, c.pp.entry, fmt::format("{} stages is not a pp in {}", stages, list(c.pp.values)));
    if (gpus_ % stages != 0) return against_gpus(c, c.stages.entry, gpus_, fmt::format("{} stages do not divide {}", stages, gpus_));
  }
  for (std::size_t i = 0; i < c.placement.size(); ++i) {
    const PlacementRule& rule = c.placement[i];
    if (c.stages.given() && rule.stage >= c.stages.values.front())
      return conflict(c, rule.entry, c.stages.entry,
                      fmt::format("stage {} does not exist with {} stages (ranks 0 to {})", rule.stage,
                                  c.stages.values.front(), c.stages.values.front() - 1));
    if (!c.stages.given() && c.pp.given() && rule.stage >= std::ranges::max(c.pp.values))
      return conflict(c, rule.entry, c.pp.entry,
                      fmt::format("stage {} does not exist with pp in {}", rule.stage, list(c.pp.values)));
    if (rule.stage >= gpus_) return against_gpus(c, rule.entry, gpus_, fmt::format("stage {} needs more stages than GPUs", rule.stage));
    for (std::size_t j = 0; j < i; ++j) {
      const PlacementRule& other = c.placement[j];
      if (other.stage == rule.stage) continue;
      for (ir::OpId op : placement_ops_[i])
        if (std::ranges::find(placement_ops_[j], op) != placement_ops_[j].end())
          return conflict(c, other.entry, rule.entry,
                          fmt::format("op '{}' is pinned to stage {} and to stage {}", graph_->op(op).name, other.stage,
                                      rule.stage));
    }
  }
  for (std::size_t i = 0; i < c.partition.size(); ++i) {
    const PartitionRule& rule = c.partition[i];
    if (rule.replicate) continue;  // may stay whole: no conflict with replicate entries or tp 1
    for (std::size_t j = 0; j < c.replicate.size(); ++j)
      for (ir::OpId op : partition_ops_[i])
        if (std::ranges::find(replicate_ops_[j], op) != replicate_ops_[j].end())
          return conflict(c, rule.entry, c.replicate[j].entry,
                          fmt::format("op '{}' must be split by the first and replicated by the second", graph_->op(op).name));
    if (c.tp.given() && !rule.degrees.empty() &&
        std::ranges::none_of(rule.degrees, [&](int d) { return c.tp.allows(d); }))
      return conflict(c, rule.entry, c.tp.entry,
                      fmt::format("its ops split {} ways but tp is in {}", list(rule.degrees), list(c.tp.values)));
    if (c.tp.given() && std::ranges::all_of(c.tp.values, [](int t) { return t == 1; }))
      return conflict(c, rule.entry, c.tp.entry, "its ops must be split but tp is 1");
  }
  return {};
}

void ConstraintChecker::check_ops(const ConfigView& view, std::vector<Violation>& out) {
  if (constraints_.partition.empty() && constraints_.replicate.empty()) return;
  const int tp = view.config.tp;
  const bool sp = view.config.sequence_parallel;
  auto [it, fresh] = layouts_.try_emplace({tp, sp});
  if (fresh) {
    std::vector<std::string> splits(graph_->ops.size());
    if (tp > 1) {
      Expected<policy::TensorParallelLayout> layout = policy::tensor_parallel_layout(fresh_, tp, sp);
      if (!layout) return;  // the policy refuses the configuration itself
      for (std::size_t op = 0; op < layout->splits.size(); ++op)
        if (layout->splits[op]) splits[op] = layout->splits[op]->identifier;
    }
    it->second = std::move(splits);
  }
  if (!it->second) return;
  const std::vector<std::string>& splits = *it->second;
  for (std::size_t r = 0; r < constraints_.partition.size(); ++r) {
    const PartitionRule& rule = constraints_.partition[r];
    for (ir::OpId op : partition_ops_[r]) {
      const std::string& id = splits[op.index()];
      const std::string& name = graph_->op(op).name;
      std::string reason;
      if (id.empty() && !rule.replicate)
        reason = fmt::format("tp {} keeps op '{}' whole, not split along {}", tp, name, list(rule.dims));
      else if (!id.empty() && std::ranges::find(rule.dims, id) == rule.dims.end())
        reason = fmt::format("tp {} splits op '{}' along '{}', not in dims {}", tp, name, id, list(rule.dims));
      else if (!id.empty() && !rule.degrees.empty() && std::ranges::find(rule.degrees, tp) == rule.degrees.end())
        reason = fmt::format("tp {} splits op '{}' {} ways, not in degrees {}", tp, name, tp, list(rule.degrees));
      if (!reason.empty()) {
        out.push_back({rule.entry, std::move(reason)});
        break;
      }
    }
  }
  for (std::size_t r = 0; r < constraints_.replicate.size(); ++r)
    for (ir::OpId op : replicate_ops_[r])
      if (const std::string& id = splits[op.index()]; !id.empty()) {
        out.push_back({constraints_.replicate[r].entry,
                       fmt::format("tp {} splits op '{}' along '{}'", tp, graph_->op(op).name, id)});
        break;
      }
}

void ConstraintChecker::check_placement(const ConfigView& view, std::vector<Violation>& out) {
  if (constraints_.placement.empty()) return;
  const int pp = view.config.pp;
  const int chunks = pp > 1 ? view.config.virtual_stages : 1;
  auto [it, fresh] = stages_.try_emplace({pp, chunks});
  if (fresh) {
    std::vector<int> ranks(graph_->ops.size(), 0);
    if (pp > 1) {
      policy::ParallelConfig stage_config{.pp = pp, .micro_batches = view.config.micro_batches};
      stage_config.virtual_stages = chunks;
      Expected<std::vector<int>> stages = policy::megatron_stages(fresh_, stage_config, *catalog_);
      if (!stages) return;  // the policy refuses the configuration itself
      for (std::size_t op = 0; op < stages->size(); ++op) ranks[op] = (*stages)[op] < 0 ? -1 : (*stages)[op] % pp;
    }
    it->second = std::move(ranks);
  }
  if (!it->second) return;
  for (std::size_t r = 0; r < constraints_.placement.size(); ++r) {
    const PlacementRule& rule = constraints_.placement[r];
    for (ir::OpId op : placement_ops_[r])
      if (const int rank = (*it->second)[op.index()]; rank != rule.stage) {
        out.push_back({rule.entry, fmt::format("pp {}{} puts op '{}' on stage {}", pp,
                                               chunks > 1 ? fmt::format(" with {} chunks", chunks) : "",
                                               graph_->op(op).name, rank)});
        break;
      }
  }
}

std::vector<Violation> ConstraintChecker::violations(const ConfigView& view) {
  const PlanConstraints& c = constraints_;
  const policy::ParallelConfig& config = view.config;
  std::vector<Violation> out;
  check(c.dp, config.dp, "dp", out);
  check(c.tp, config.tp, "tp", out);
  check(c.pp, config.pp, "pp", out);
  if (c.stages.given() && config.pp != c.stages.values.front())
    out.push_back({c.stages.entry, fmt::format("pp {} is not {} stages", config.pp, c.stages.values.front())});
  check(c.zero, config.zero, "ZeRO stage", out);
  check(c.recompute, std::string(policy::name(config.recompute)), "recompute", out);
  check(c.offload, std::string(exec::name(view.offload)), "offload", out);
  check(c.overlap, std::string(policy::name(config.overlap)), "overlap", out);
  check(c.sequence_parallel, config.sequence_parallel, "sequence_parallel", out);
  if (config.pp > 1) check(c.schedules, schedule_name(config), "schedule", out);
  check(c.micro_batches, config.micro_batches, "micro-batches", out);
  check(c.micro_batch_size, view.micro_batch_size, "micro-batch size", out);
  check_ops(view, out);
  check_placement(view, out);
  // File order: by line.
  std::ranges::stable_sort(out, {}, [](const Violation& v) { return v.entry.line; });
  return out;
}

Expected<std::vector<Candidate>> ConstraintChecker::restrict(const std::vector<Candidate>& candidates,
                                                             std::string_view space, exec::Offload offload) {
  std::vector<Candidate> kept;
  std::vector<std::vector<Violation>> broken;  // by candidate
  std::vector<EntryName> entries;              // every entry some candidate breaks, in file order
  for (const Candidate& candidate : candidates) {
    std::vector<Violation> v = violations({candidate.config, candidate.micro_batch_size, offload});
    // The space turns sequence parallelism on wherever the model takes it; where its splits (norms,
    // dropouts and residual adds along the sequence) break the file, the same configuration without it.
    if (!v.empty() && candidate.config.sequence_parallel) {
      Candidate plain = candidate;
      plain.config.sequence_parallel = false;
      if (violations({plain.config, plain.micro_batch_size, offload}).empty()) {
        kept.push_back(std::move(plain));
        broken.emplace_back();
        continue;
      }
    }
    if (v.empty()) kept.push_back(candidate);
    for (const Violation& one : v)
      if (std::ranges::find(entries, one.entry) == entries.end()) entries.push_back(one.entry);
    broken.push_back(std::move(v));
  }
  if (!kept.empty() || candidates.empty()) return kept;
  std::ranges::stable_sort(entries, {}, &EntryName::line);
  const auto breaks = [&](std::size_t k, const EntryName& e) {
    return std::ranges::any_of(broken[k], [&](const Violation& v) { return v.entry == e; });
  };
  const auto reason = [&](std::size_t k, const EntryName& e) {
    for (const Violation& v : broken[k])
      if (v.entry == e) return v.reason;
    return std::string();
  };
  const std::string& source = constraints_.source;
  for (const EntryName& e : entries) {
    bool admits = false;
    for (std::size_t k = 0; k < candidates.size() && !admits; ++k) admits = !breaks(k, e);
    if (!admits)
      return fail(fmt::format("constraints file '{}': entry {} admits none of the {} configurations of {} ({} GPUs): "
                              "the first, {}: {}",
                              source, to_string(e), candidates.size(), space, gpus_, describe(candidates.front()),
                              reason(0, e)),
                  fmt::format("widen or remove the entry; docs/search.md lists the space; {}", kDoc));
  }
  for (std::size_t i = 0; i < entries.size(); ++i)
    for (std::size_t j = i + 1; j < entries.size(); ++j) {
      bool admits = false;
      std::size_t only_i = candidates.size();
      for (std::size_t k = 0; k < candidates.size() && !admits; ++k) {
        const bool bi = breaks(k, entries[i]), bj = breaks(k, entries[j]);
        admits = !bi && !bj;
        if (!bi && only_i == candidates.size()) only_i = k;
      }
      if (!admits)
        return fail(fmt::format("constraints file '{}': entries {} and {} conflict: no configuration of {} ({} GPUs) "
                                "satisfies both; {} satisfies the first but not the second: {}",
                                source, to_string(entries[i]), to_string(entries[j]), space, gpus_,
                                describe(candidates[only_i]), reason(only_i, entries[j])),
                    fmt::format("widen or remove one of the two entries; {}", kDoc));
    }
  std::vector<std::string> names;
  for (const EntryName& e : entries) names.push_back(to_string(e));
  return fail(fmt::format("constraints file '{}': entries {} together admit none of the {} configurations of {} ({} GPUs)",
                          source, join(names, ", "), candidates.size(), space, gpus_),
              fmt::format("widen or remove some of these entries; {}", kDoc));
}

}  // namespace loom::search
