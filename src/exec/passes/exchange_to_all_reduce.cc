// exchange_to_all_reduce (exec/passes.h): exchanges of value parts become blocking all-reduces.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"
#include "program_edits.h"

namespace loom::exec {
namespace {

using detail::Issue;
using detail::ProgramEdit;

// One member's exchange: its own part sent to every peer, the peers' parts received, all n parts of one
// box combined into the whole.
struct Exchange {
  std::size_t combine = 0;
  BufferId own, output;
  std::vector<std::size_t> sends, recvs;  // positions
  std::vector<int> group;                 // ascending: the peers and this device
  std::vector<std::uint32_t> peers_sends;  // ids of the peers' exchanges whose sends this one receives
  std::int64_t tag = -1;  // its collective's (before that, a negative name shared by the members)
  bool valid = true;
};

using SendKey = std::tuple<int, int, std::int64_t>;  // (sender, receiver, tag)

// The group step (CollectiveInfo::step) the exchange's sends on `device` share, where it holds the
// exchange's group: its all-reduce runs beside the other groups of that step (the exchanges of a tensor's
// other pieces, exec/concurrent_steps.h) and is priced with them. -1 otherwise.
std::int64_t sends_step(const ExecPlan& exec, std::size_t device, const Exchange& x) {
  std::int64_t step = -1;
  for (std::size_t k : x.sends) {
    const std::int64_t tag = std::get<Send>(exec.programs[device][k]).tag;
    const std::int64_t of = exec.collectives[static_cast<std::size_t>(tag)].step;
    if (of < 0 || (step >= 0 && of != step)) return -1;
    step = of;
  }
  if (step < 0) return -1;
  const auto& groups = exec.group_steps[static_cast<std::size_t>(step)];
  return std::ranges::find(groups, x.group) != groups.end() ? step : -1;
}

class Finder {
 public:
  Finder(const ExecPlan& exec, int device) : exec_(exec), device_(device), program_(exec.programs[static_cast<std::size_t>(device)]) {
    for (std::size_t i = 0; i < program_.size(); ++i) {
      for_each_written(program_[i], [&](BufferId b) { writer_[b.value] = i; });
      for_each_read(program_[i], [&](BufferId b) { readers_[b.value].push_back(i); });
    }
  }

  std::vector<Exchange> find() const {
    std::vector<Exchange> found;
    for (std::size_t i = 0; i < program_.size(); ++i)
      if (const auto* l = std::get_if<Local>(&program_[i]); l != nullptr && l->kind == LocalKind::combine)
        if (auto x = exchange(i, *l)) found.push_back(std::move(*x));
    return found;
  }

 private:
  std::optional<Exchange> exchange(std::size_t i, const Local& l) const {
    const plan::SubTensor& out = exec_.buffer(l.output).piece;
    if (!out.value.is_whole() || l.inputs.size() < 2) return std::nullopt;
    Exchange x{.combine = i, .own = {}, .output = l.output, .sends = {}, .recvs = {}, .group = {}, .peers_sends = {},
               .tag = -1, .valid = true};
    std::set<std::int64_t> parts;
    for (BufferId b : l.inputs) {
      const plan::SubTensor& p = exec_.buffer(b).piece;
      if (p.tensor != out.tensor || !plan::same_piece(p, out, false) ||
          p.value.count != static_cast<std::int64_t>(l.inputs.size()))
        return std::nullopt;
      parts.insert(p.value.index);
      const auto at = writer_.find(b.value);
      if (at == writer_.end()) return std::nullopt;
      if (const auto* recv = std::get_if<Recv>(&program_[at->second])) {
        const auto& readers = readers_.at(b.value);
        if (readers.size() != 1 || readers.front() != i) return std::nullopt;  // the part is read elsewhere too
        x.recvs.push_back(at->second);
        x.group.push_back(recv->peer);
      } else {
        if (x.own.valid()) return std::nullopt;
        x.own = b;
      }
    }
    std::ranges::sort(x.group);
    if (!x.own.valid() || parts.size() != l.inputs.size() || std::ranges::adjacent_find(x.group) != x.group.end())
      return std::nullopt;
    std::vector<int> sent_to;
    for (std::size_t k : readers_.at(x.own.value))
      if (const auto* send = std::get_if<Send>(&program_[k])) {
        x.sends.push_back(k);
        sent_to.push_back(send->peer);
      }
    std::ranges::sort(sent_to);
    if (sent_to != x.group) return std::nullopt;
    x.group.insert(std::ranges::upper_bound(x.group, device_), device_);
    return x;
  }

  const ExecPlan& exec_;
  int device_;
  const std::vector<Instruction>& program_;
  std::unordered_map<std::uint32_t, std::size_t> writer_;
  std::unordered_map<std::uint32_t, std::vector<std::size_t>> readers_;
};

}  // namespace

int exchange_to_all_reduce(ExecPlan& exec) {
  const auto n = static_cast<std::size_t>(exec.num_devices);
  if (exec.num_devices < 2) return 0;
  // Every exchange, numbered across devices; which exchange each send belongs to.
  std::vector<std::pair<int, Exchange>> all;
  std::map<SendKey, std::uint32_t> send_of;
  for (int d = 0; d < exec.num_devices; ++d) {
    const auto& program = exec.programs[static_cast<std::size_t>(d)];
    // An exchange combines parts received: a program without receives has none, and indexing its
    // buffers' writers and readers would be most of the pass (a ZeRO slice: 64 programs, no sends).
    if (std::ranges::none_of(program, [](const Instruction& in) { return std::holds_alternative<Recv>(in); })) continue;
    for (Exchange& x : Finder(exec, d).find()) {
      const auto id = static_cast<std::uint32_t>(all.size());
      for (std::size_t k : x.sends) {
        const auto& s = std::get<Send>(program[k]);
        send_of.emplace(SendKey{d, s.peer, s.tag}, id);
      }
      all.emplace_back(d, std::move(x));
    }
  }
  for (auto& [d, x] : all) {
    const auto& program = exec.programs[static_cast<std::size_t>(d)];
    for (std::size_t k : x.recvs) {
      const auto& r = std::get<Recv>(program[k]);
      const auto it = send_of.find(SendKey{r.peer, d, r.tag});
      if (it == send_of.end()) x.valid = false;
      else x.peers_sends.push_back(it->second);
    }
  }
  // Valid where every part it receives comes from a valid exchange of the same group; until stable.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [d, x] : all) {
      if (!x.valid) continue;
      for (std::uint32_t p : x.peers_sends)
        if (!all[p].second.valid || all[p].second.group != x.group) {
          x.valid = false;
          changed = true;
          break;
        }
    }
  }
  // One name per exchange, shared by its members (each reaches all the others through its receives):
  // negative until the order check keeps it, then a fresh tag.
  std::vector<std::vector<Issue>> issues = detail::issued_collectives(exec);
  for (std::size_t id = 0; id < all.size(); ++id) {
    Exchange& x = all[id].second;
    if (!x.valid || x.tag != -1) continue;
    x.tag = -2 - static_cast<std::int64_t>(id);
    for (std::uint32_t p : x.peers_sends) all[p].second.tag = x.tag;
  }
  for (const auto& [d, x] : all)
    if (x.valid) issues[static_cast<std::size_t>(d)].push_back(Issue{x.combine, 0, x.tag, x.group});
  const std::set<std::vector<int>> disordered = detail::groups_out_of_order(std::move(issues));
  std::map<std::int64_t, std::int64_t> tag_of;  // name -> tag
  for (auto& [d, x] : all) {
    if (!x.valid || disordered.contains(x.group)) continue;
    auto [it, fresh] = tag_of.try_emplace(x.tag, 0);
    if (fresh)
      it->second = exec.add_tag(CollectiveInfo{.tensor = exec.buffer(x.output).piece.tensor,
                                               .rule = fmt::format("V->R all-reduce (an exchange of {} value parts)", x.group.size()),
                                               .paired = -1,
                                               .step = sends_step(exec, static_cast<std::size_t>(d), x)});
    x.tag = it->second;
  }

  std::vector<ProgramEdit> edits(n);
  std::vector<std::unordered_set<std::uint32_t>> dropped(n), refreed(n);
  int rewritten = 0;
  for (auto& [d, x] : all) {
    if (!x.valid || disordered.contains(x.group)) continue;
    const auto device = static_cast<std::size_t>(d);
    const auto& program = exec.programs[device];
    for (std::size_t k : x.sends) edits[device].remove(k);
    for (std::size_t k : x.recvs) {
      edits[device].remove(k);
      dropped[device].insert(std::get<Recv>(program[k]).buffer.value);
    }
    edits[device].replace(x.combine, Collective{comm::Primitive::all_reduce, x.group, x.tag, x.own, x.output});
    refreed[device].insert(x.own.value);  // its last read may have been a send
    if (d == x.group.front()) ++rewritten;
  }
  for (std::size_t d = 0; d < n; ++d)
    if (!edits[d].empty()) std::move(edits[d]).apply(exec.programs[d], dropped[d], refreed[d]);
  if (rewritten > 0) detail::drop_unwritten_buffers(exec);
  return rewritten;
}

}  // namespace loom::exec
