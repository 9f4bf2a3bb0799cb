#include "gradient_buckets.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace loom::codegen::detail {
namespace {

// One parameter gradient's reduction on one rank, as the ExecPlan wrote it.
struct Reduction {
  std::size_t ready = 0;               // the instruction writing the gradient part (it is final after it)
  std::size_t place = 0;               // where the reduced gradient is written (the collective or combine)
  std::vector<std::size_t> removed;    // the instructions the bucket replaces
  std::vector<exec::BufferId> dropped;  // buffers that no longer exist (received parts): their frees go too
  exec::BufferId input, output;
  std::vector<int> group;  // ascending
  std::string key;         // the same on every member: tensor, box, occurrence
  std::int64_t bytes = 0;
  ir::DType dtype = ir::DType::f32;
  bool gradient = false;  // a parameter gradient: bucketed; else (an exchange of activation parts) one all-reduce
  std::vector<std::pair<int, plan::SubTensor>> parts;  // exchange form: each member's part
  bool valid = true;
};

bool is_parameter_gradient(const ir::Graph& graph, ir::TensorId id) {
  const ir::FullTensor& t = graph.tensor(id);
  return t.role == ir::TensorRole::gradient && t.owner.valid() &&
         graph.tensor(t.owner).role == ir::TensorRole::parameter;
}

bool same_box(const plan::SubTensor& a, const plan::SubTensor& b) { return plan::same_piece(a, b, false); }

std::string box_key(const plan::SubTensor& piece) {
  plan::SubTensor p = plan::normalized(piece);
  p.value = plan::ValuePart::whole();
  return p.to_string();
}

template <class F>
void for_each_read(const exec::Instruction& instruction, F&& f) {
  std::visit(
      [&](const auto& in) {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, exec::Compute>) {
          for (exec::BufferId b : in.inputs)
            if (b.valid()) f(b);
        } else if constexpr (std::is_same_v<T, exec::Collective>) {
          f(in.input);
        } else if constexpr (std::is_same_v<T, exec::Send>) {
          f(in.buffer);
        } else if constexpr (std::is_same_v<T, exec::Local>) {
          for (exec::BufferId b : in.inputs) f(b);
        }
      },
      instruction);
}

template <class F>
void for_each_write(const exec::Instruction& instruction, F&& f) {
  std::visit(
      [&](const auto& in) {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, exec::Compute>) {
          for (exec::BufferId b : in.outputs) f(b);
        } else if constexpr (std::is_same_v<T, exec::Load> || std::is_same_v<T, exec::Collective> ||
                             std::is_same_v<T, exec::Local>) {
          f(in.output);
        } else if constexpr (std::is_same_v<T, exec::Recv>) {
          f(in.buffer);
        }
      },
      instruction);
}

// Every member's input and output piece of each collective tag.
std::map<std::int64_t, std::vector<std::pair<plan::SubTensor, plan::SubTensor>>> tag_pieces(const exec::ExecPlan& exec) {
  std::map<std::int64_t, std::vector<std::pair<plan::SubTensor, plan::SubTensor>>> pieces;
  for (const auto& program : exec.programs)
    for (const exec::Instruction& instruction : program)
      if (const auto* c = std::get_if<exec::Collective>(&instruction))
        pieces[c->tag].emplace_back(exec.buffer(c->input).piece, exec.buffer(c->output).piece);
  return pieces;
}

class RankScanner {
 public:
  RankScanner(const exec::ExecPlan& exec, int rank,
              const std::map<std::int64_t, std::vector<std::pair<plan::SubTensor, plan::SubTensor>>>& tags)
      : exec_(exec), graph_(*exec.plan->graph), rank_(rank), program_(exec.programs[static_cast<std::size_t>(rank)]), tags_(tags) {
    for (std::size_t i = 0; i < program_.size(); ++i) {
      for_each_write(program_[i], [&](exec::BufferId b) { writer_[b.value] = i; });
      for_each_read(program_[i], [&](exec::BufferId b) { readers_[b.value].push_back(i); });
    }
  }

  std::vector<Reduction> scan() {
    std::vector<Reduction> found;
    for (std::size_t i = 0; i < program_.size(); ++i) {
      std::optional<Reduction> r;
      if (const auto* c = std::get_if<exec::Collective>(&program_[i])) r = from_all_reduce(i, *c);
      if (const auto* l = std::get_if<exec::Local>(&program_[i]); l != nullptr && l->kind == exec::LocalKind::combine)
        r = from_exchange(i, *l);
      if (!r) continue;
      r->gradient = is_parameter_gradient(graph_, exec_.buffer(r->output).piece.tensor);
      const std::string base = box_key(exec_.buffer(r->output).piece);
      r->key = fmt::format("{}#{}", base, occurrences_[base]++);
      const plan::SubTensor& out = exec_.buffer(r->output).piece;
      r->dtype = graph_.tensor(out.tensor).dtype;
      r->bytes = out.numel() * ir::size_bytes(r->dtype);
      found.push_back(std::move(*r));
    }
    // A gradient finalized by another replaced reduction has no instruction to issue after: left as written.
    std::set<std::size_t> removed;
    for (const Reduction& r : found)
      if (r.gradient) removed.insert(r.removed.begin(), r.removed.end());
    for (Reduction& r : found)
      if (r.gradient && removed.contains(r.ready)) r.valid = false;
    return found;
  }

 private:
  std::optional<std::size_t> written_at(exec::BufferId b) const {
    const auto it = writer_.find(b.value);
    return it == writer_.end() ? std::nullopt : std::optional(it->second);
  }

  // A sum all-reduce of a parameter gradient whose members all hold the same box and get it whole.
  std::optional<Reduction> from_all_reduce(std::size_t i, const exec::Collective& c) {
    if (c.kind != comm::Primitive::all_reduce || c.group.size() < 2) return std::nullopt;
    const plan::SubTensor& out = exec_.buffer(c.output).piece;
    if (!is_parameter_gradient(graph_, out.tensor) || !out.value.is_whole()) return std::nullopt;
    const auto it = tags_.find(c.tag);
    if (it == tags_.end()) return std::nullopt;
    for (const auto& [in_piece, out_piece] : it->second)
      if (!same_box(in_piece, out) || !same_box(out_piece, out) || !out_piece.value.is_whole()) return std::nullopt;
    const auto ready = written_at(c.input);
    if (!ready) return std::nullopt;
    Reduction r;
    r.ready = *ready;
    r.place = i;
    r.removed = {i};
    r.input = c.input;
    r.output = c.output;
    r.group = c.group;
    std::ranges::sort(r.group);
    return r;
  }

  // The exchange form: this rank's part sent to every peer, the peers' parts received, all n parts of the
  // same box combined into the whole. The same sum as an all-reduce over this rank and its peers.
  std::optional<Reduction> from_exchange(std::size_t i, const exec::Local& l) {
    const plan::SubTensor& out = exec_.buffer(l.output).piece;
    if (!out.value.is_whole() || l.inputs.size() < 2) return std::nullopt;
    std::optional<exec::BufferId> own;
    std::vector<std::size_t> recvs;
    std::set<int> recv_peers;
    std::set<std::int64_t> parts;
    std::vector<std::pair<int, plan::SubTensor>> member_parts;
    for (exec::BufferId b : l.inputs) {
      const plan::SubTensor& p = exec_.buffer(b).piece;
      if (p.tensor != out.tensor || !same_box(p, out) || p.value.count != static_cast<std::int64_t>(l.inputs.size()))
        return std::nullopt;
      parts.insert(p.value.index);
      const auto at = written_at(b);
      if (!at) return std::nullopt;
      if (const auto* recv = std::get_if<exec::Recv>(&program_[*at])) {
        const auto& readers = readers_[b.value];
        if (readers.size() != 1 || readers.front() != i) return std::nullopt;  // the part is read elsewhere too
        recvs.push_back(*at);
        recv_peers.insert(recv->peer);
        member_parts.emplace_back(recv->peer, p);
      } else {
        if (own) return std::nullopt;
        own = b;
        member_parts.emplace_back(rank_, p);
      }
    }
    if (!own || parts.size() != l.inputs.size() || recv_peers.size() != recvs.size()) return std::nullopt;
    std::vector<std::size_t> sends;
    std::set<int> send_peers;
    for (std::size_t k : readers_[own->value])
      if (const auto* send = std::get_if<exec::Send>(&program_[k])) {
        sends.push_back(k);
        send_peers.insert(send->peer);
      }
    if (send_peers != recv_peers || sends.size() != send_peers.size()) return std::nullopt;
    Reduction r;
    r.ready = *written_at(*own);
    r.place = i;
    r.removed = sends;
    r.removed.insert(r.removed.end(), recvs.begin(), recvs.end());
    r.removed.push_back(i);
    for (exec::BufferId b : l.inputs)
      if (b != *own) r.dropped.push_back(b);
    r.input = *own;
    r.output = l.output;
    r.group.assign(recv_peers.begin(), recv_peers.end());
    r.group.push_back(rank_);
    std::ranges::sort(r.group);
    std::ranges::sort(member_parts, {}, &std::pair<int, plan::SubTensor>::first);
    r.parts = std::move(member_parts);
    return r;
  }

  const exec::ExecPlan& exec_;
  const ir::Graph& graph_;
  int rank_;
  const std::vector<exec::Instruction>& program_;
  const std::map<std::int64_t, std::vector<std::pair<plan::SubTensor, plan::SubTensor>>>& tags_;
  std::map<std::uint32_t, std::size_t> writer_;
  std::map<std::uint32_t, std::vector<std::size_t>> readers_;
  std::map<std::string, int> occurrences_;
};

// Every member of a reduction's group must replace the same reduction (same key, same group); one that does
// not leaves it as written on every member. Repeated until nothing changes.
void keep_agreed(std::vector<std::vector<Reduction>>& by_rank) {
  std::vector<std::map<std::string, std::size_t>> index(by_rank.size());
  for (std::size_t r = 0; r < by_rank.size(); ++r)
    for (std::size_t k = 0; k < by_rank[r].size(); ++k) index[r][by_rank[r][k].key] = k;
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < by_rank.size(); ++r)
      for (Reduction& red : by_rank[r]) {
        if (!red.valid) continue;
        for (int member : red.group) {
          const auto& other = index[static_cast<std::size_t>(member)];
          const auto it = other.find(red.key);
          const bool agreed = it != other.end() && by_rank[static_cast<std::size_t>(member)][it->second].valid &&
                              by_rank[static_cast<std::size_t>(member)][it->second].group == red.group;
          if (!agreed) {
            red.valid = false;
            changed = true;
            break;
          }
        }
      }
  }
}

// Consecutive reductions (in the order their gradients become final) over one group and dtype; as DDP's
// bucket assignment, a bucket takes gradients until it holds cap bytes or more (its group's first bucket:
// first_cap), and is issued before the first of its members is needed.
std::vector<std::vector<const Reduction*>> bucket(const std::vector<Reduction>& reductions, std::int64_t cap,
                                                  std::int64_t first_cap) {
  std::vector<const Reduction*> order;
  for (const Reduction& r : reductions)
    if (r.valid && r.gradient) order.push_back(&r);
  std::ranges::stable_sort(order, [](const Reduction* a, const Reduction* b) { return std::tie(a->ready, a->place) < std::tie(b->ready, b->place); });
  std::vector<std::vector<const Reduction*>> buckets;
  std::int64_t bytes = 0;
  std::size_t first_place = 0;
  for (const Reduction* r : order) {
    if (!buckets.empty()) {
      const Reduction& head = *buckets.back().front();
      const std::size_t place = std::min(first_place, r->place);
      // The open bucket is its group's first when no earlier bucket has that group.
      const bool first = std::none_of(buckets.begin(), buckets.end() - 1,
                                      [&](const auto& b) { return b.front()->group == head.group; });
      if (head.group == r->group && head.dtype == r->dtype && bytes < (first ? first_cap : cap) &&
          r->ready < place) {
        buckets.back().push_back(r);
        bytes += r->bytes;
        first_place = place;
        continue;
      }
    }
    buckets.push_back({r});
    bytes = r->bytes;
    first_place = r->place;
  }
  return buckets;
}

}  // namespace

std::vector<RankBuckets> plan_gradient_buckets(const exec::ExecPlan& exec, std::int64_t cap_bytes,
                                               std::int64_t first_cap_bytes) {
  const auto n = static_cast<std::size_t>(exec.num_devices);
  std::vector<RankBuckets> out(n);
  if (exec.num_devices < 2) return out;
  const auto tags = tag_pieces(exec);
  std::vector<std::vector<Reduction>> by_rank;
  for (int r = 0; r < exec.num_devices; ++r) by_rank.push_back(RankScanner(exec, r, tags).scan());
  keep_agreed(by_rank);

  // Per rank, per group: the order in which collectives are issued (buckets and the collectives left as
  // written); gloo and NCCL match a group's collectives by that order, so every member must agree.
  std::vector<std::map<std::vector<int>, std::vector<std::string>>> issue_order(n);
  for (std::size_t r = 0; r < n; ++r) {
    const auto& program = exec.programs[r];
    std::set<std::size_t> removed;
    std::vector<std::tuple<std::size_t, int, std::vector<int>, std::string>> events;  // (position, after?, group, what)
    std::map<std::vector<int>, int> per_group;
    for (const auto& members : bucket(by_rank[r], cap_bytes, first_cap_bytes)) {
      GradientBucket b;
      b.group = members.front()->group;
      std::size_t issue = 0, wait = program.size();
      std::vector<std::string> keys;
      for (const Reduction* red : members) {
        b.inputs.push_back(red->input);
        b.outputs.push_back(red->output);
        b.tensors.push_back(exec.plan->graph->tensor(exec.buffer(red->output).piece.tensor).name);
        b.bytes += red->bytes;
        issue = std::max(issue, red->ready);
        wait = std::min(wait, red->place);
        keys.push_back(red->key);
        removed.insert(red->removed.begin(), red->removed.end());
        for (exec::BufferId d : red->dropped)
          for (std::size_t i = 0; i < program.size(); ++i)
            if (const auto* f = std::get_if<exec::Free>(&program[i]); f != nullptr && f->buffer == d) removed.insert(i);
      }
      b.index = per_group[b.group]++;
      const int id = static_cast<int>(out[r].buckets.size());
      out[r].issue_after[issue].push_back(id);
      out[r].wait_before[wait].push_back(id);
      events.emplace_back(issue, 1, b.group, fmt::format("bucket {}", fmt::join(keys, ",")));
      out[r].buckets.push_back(std::move(b));
    }
    // Exchanges of activation parts become one synchronous all-reduce where their combine stood.
    for (const Reduction& red : by_rank[r]) {
      if (!red.valid || red.gradient) continue;
      ExchangeAllReduce x{.input = red.input, .output = red.output, .group = red.group, .parts = {}};
      for (const auto& [member, piece] : red.parts) x.parts.push_back(piece);
      out[r].all_reduce_at.emplace(red.place, std::move(x));
      removed.insert(red.removed.begin(), red.removed.end());
      for (exec::BufferId d : red.dropped)
        for (std::size_t i = 0; i < program.size(); ++i)
          if (const auto* f = std::get_if<exec::Free>(&program[i]); f != nullptr && f->buffer == d) removed.insert(i);
      events.emplace_back(red.place, 0, red.group, fmt::format("exchange {}", red.key));
    }
    out[r].skipped = removed;
    for (std::size_t i = 0; i < program.size(); ++i)
      if (const auto* c = std::get_if<exec::Collective>(&program[i]); c != nullptr && !removed.contains(i)) {
        std::vector<int> group = c->group;
        std::ranges::sort(group);
        events.emplace_back(i, 0, group, fmt::format("tag {}", c->tag));
      }
    std::ranges::sort(events);
    for (const auto& [position, after, group, what] : events) issue_order[r][group].push_back(what);
  }
  for (std::size_t r = 0; r < n; ++r)
    for (const auto& [group, sequence] : issue_order[r])
      for (int member : group)
        if (issue_order[static_cast<std::size_t>(member)][group] != sequence) return std::vector<RankBuckets>(n);
  return out;
}

}  // namespace loom::codegen::detail
