// prefetch_gathers (exec/passes.h): ZeRO-3's blocking parameter all-gathers become starts issued ahead of
// their readers, as DeepSpeed's stage-3 prefetcher fetches the next modules' parameters while the current
// one computes.
#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "loom/core/both_cores.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/exec/passes.h"
#include "program_edits.h"

namespace loom::exec {
namespace {

using detail::Issue;
using detail::ProgramEdit;

// One blocking all-gather of a parameter's shards into the piece its readers take, on one device.
struct Gather {
  std::size_t place = 0;   // the blocking all-gather
  std::size_t ready = 0;   // the first position its input may be read at (after its writer, or that one's wait)
  std::size_t reader = 0;  // the first instruction after it that reads its output
  BufferId input, output;
  std::int64_t tag = 0;
  std::vector<int> group;  // as the collective lists it (piece order)
  ir::DType dtype = ir::DType::f32;
  bool read = false;       // some instruction reads the output (else its first use is its free)
  bool valid = true;
};

// A parameter's piece as its readers take it: the whole value of its box (the whole parameter, or with
// tensor parallelism this device's slice of it), which an all-gather assembles from ZeRO-3's shards.
bool is_parameter_piece(const ExecPlan& exec, BufferId b) {
  const plan::SubTensor& piece = exec.buffer(b).piece;
  return exec.plan->graph->tensor(piece.tensor).role == ir::TensorRole::parameter && piece.value.is_whole();
}

// The program's blocking all-gathers of parameter pieces, in program order, with where each may start
// and where its output is first read.
std::vector<Gather> gathers_of(const ExecPlan& exec, const std::vector<Instruction>& program) {
  std::vector<Gather> found;
  std::unordered_map<std::uint32_t, std::size_t> ready;      // buffer -> first position it may be read at
  std::unordered_map<std::int64_t, std::vector<BufferId>> pending;  // a start's outputs, until its wait
  std::unordered_map<std::uint32_t, std::size_t> output_of;  // output not yet used -> its gather
  std::unordered_map<std::uint32_t, std::size_t> gathered;   // every gather's output -> its gather
  for (std::size_t i = 0; i < program.size(); ++i) {
    const Instruction& in = program[i];
    const auto use = [&](BufferId b, bool read) {
      if (const auto it = output_of.find(b.value); it != output_of.end()) {
        found[it->second].reader = i;
        found[it->second].read = read;
        output_of.erase(it);
      }
    };
    for_each_read(in, [&](BufferId b) { use(b, true); });
    if (const auto* f = std::get_if<Free>(&in)) use(f->buffer, false);
    if (const auto* c = std::get_if<Collective>(&in);
        c != nullptr && c->kind == comm::Primitive::all_gather && c->group.size() >= 2 && is_parameter_piece(exec, c->output)) {
      const auto r = ready.find(c->input.value);
      Gather g{.place = i, .ready = r != ready.end() ? r->second : 0, .reader = program.size(), .input = c->input,
               .output = c->output, .tag = c->tag, .group = c->group,
               .dtype = exec.plan->graph->tensor(exec.buffer(c->output).piece.tensor).dtype, .read = false, .valid = true};
      // A shard another gather of this pass writes has no instruction to start after: left blocking.
      g.valid = !gathered.contains(c->input.value);
      output_of.emplace(c->output.value, found.size());
      gathered.emplace(c->output.value, found.size());
      found.push_back(std::move(g));
    }
    if (const auto* s = std::get_if<CollectiveStart>(&in)) {
      pending[s->tag] = s->outputs;
    } else if (const auto* w = std::get_if<CollectiveWait>(&in)) {
      for (BufferId b : pending[w->tag]) ready[b.value] = i + 1;
    } else {
      for_each_written(in, [&](BufferId b) { ready[b.value] = i + 1; });
    }
  }
  for (Gather& g : found)
    if (!g.read) g.valid = false;
  return found;
}

// Gathers of one device that start together: those with one first reader, group and dtype (the runtime
// gathers them as one flat buffer, as DeepSpeed fetches a module's parameters at once).
struct Unit {
  std::vector<const Gather*> members;
  std::vector<int> devices;  // the group's devices, ascending
  std::size_t start = 0;  // before this instruction
  std::size_t wait = 0;   // before this one: the first reader
  int order = 0;          // among the device's starts before one instruction
  std::int64_t name = 0;  // shared by the members' units of the same gathers
};

class Prefetcher {
 public:
  Prefetcher(ExecPlan& exec, const ExecPassOptions& options) : exec_(exec), options_(options) {}

  void scan() {
    gathers_.resize(exec_.programs.size());
    // Each device's scan reads the plan and writes its own entry: on both cores, the serial loop's result.
    for_each_on_both_cores(exec_.programs.size(), [&](std::size_t d) { gathers_[d] = gathers_of(exec_, exec_.programs[d]); });
    detail::keep_agreed_by_all_members(gathers_);  // a gather is prefetched only where every member prefetches it
  }

  // Units per device in the order of their readers; unit k starts as early as its inputs allow, but not
  // before the reader of unit k - depth (so at most `depth` units are in flight ahead of the one being
  // read) nor after the blocking gathers it replaces.
  void place() {
    units_.resize(exec_.programs.size());
    std::map<std::vector<std::int64_t>, std::int64_t> names;
    const auto depth = static_cast<std::size_t>(options_.prefetch_depth);
    for (std::size_t d = 0; d < exec_.programs.size(); ++d) {
      std::vector<const Gather*> order;
      for (const Gather& g : gathers_[d])
        if (g.valid) order.push_back(&g);
      std::ranges::sort(order, [](const Gather* a, const Gather* b) {
        return std::tie(a->reader, a->group, a->dtype, a->place) < std::tie(b->reader, b->group, b->dtype, b->place);
      });
      std::vector<Unit>& units = units_[d];
      for (const Gather* g : order) {
        const Gather* head = units.empty() ? nullptr : units.back().members.front();
        if (head != nullptr && head->reader == g->reader && head->group == g->group && head->dtype == g->dtype)
          units.back().members.push_back(g);
        else
          units.push_back(Unit{.members = {g}, .devices = g->group, .start = 0, .wait = g->reader, .order = 0, .name = 0});
      }
      std::map<std::size_t, int> at_start;
      for (std::size_t k = 0; k < units.size(); ++k) {
        Unit& u = units[k];
        std::ranges::sort(u.devices);
        std::size_t ready = 0, place = exec_.programs[d].size();
        std::vector<std::int64_t> tags;
        for (const Gather* g : u.members) {
          ready = std::max(ready, g->ready);
          place = std::min(place, g->place);
          tags.push_back(g->tag);
        }
        const std::size_t bound = k >= depth ? units[k - depth].wait : 0;
        u.start = std::max(ready, std::min(place, bound));
        u.order = at_start[u.start]++;
        std::ranges::sort(tags);
        u.name = names.try_emplace(std::move(tags), -2 - static_cast<std::int64_t>(names.size())).first->second;
      }
    }
  }

  // Drops the units of groups whose members would issue their collectives in different orders, and the
  // units whose starts the devices would run in orders that wait on each other across groups (a
  // two-level gather's first step started before a flat gather on one device, after it on another),
  // until neither is left: a dropped unit's gathers stay blocking where they were.
  void keep_ordered() {
    for (bool dropped = true; dropped;) {
      std::unordered_set<std::int64_t> moved;
      std::vector<std::vector<Issue>> started(units_.size());
      for (std::size_t d = 0; d < units_.size(); ++d)
        for (const Unit& u : units_[d]) {
          for (const Gather* g : u.members) moved.insert(g->tag);
          // Issued before the instruction at u.start: behind what comes after the one before it.
          started[d].push_back(Issue{u.start, u.order - static_cast<int>(units_[d].size()), u.name, u.devices});
        }
      const detail::BrokenOrders broken = detail::broken_orders(exec_, moved, std::move(started));
      dropped = false;
      for (auto& units : units_)
        dropped |= std::erase_if(units, [&](const Unit& u) {
                     return broken.disordered_groups.contains(u.devices) || broken.cyclic_starts.contains(u.name);
                   }) > 0;
    }
  }

  ExecPassStats rewrite() {
    ExecPassStats stats;
    std::map<std::int64_t, std::int64_t> tag_of;  // unit name -> its tag
    for (std::size_t d = 0; d < exec_.programs.size(); ++d) {
      auto& program = exec_.programs[d];
      ProgramEdit edit;
      // Waits first: where a unit is waited for, the next one starts right after (DeepSpeed's order).
      std::vector<std::int64_t> tags;
      for (const Unit& u : units_[d]) {
        const auto describe = [](std::size_t n, std::int64_t bytes) {
          return fmt::format("prefetch: all-gather of {} parameters ({} B)", n, bytes);
        };
        const auto [tag, added] = detail::start_tag(exec_, tag_of, u.name, u.members, describe);
        if (added) {
          ++stats.prefetches;
          stats.prefetched_gathers += static_cast<int>(u.members.size());
        }
        tags.push_back(tag);
        edit.insert_before(u.wait, CollectiveWait{tag});
      }
      for (std::size_t k = 0; k < units_[d].size(); ++k) {
        const Unit& u = units_[d][k];
        edit.insert_before(u.start, detail::start_replacing(comm::Primitive::all_gather, tags[k], u.members, edit));
      }
      if (!edit.empty()) std::move(edit).apply(program, {}, {});
    }
    return stats;
  }

 private:
  ExecPlan& exec_;
  const ExecPassOptions& options_;
  std::vector<std::vector<Gather>> gathers_;  // by device
  std::vector<std::vector<Unit>> units_;      // by device, in reader order
};

}  // namespace

ExecPassStats prefetch_gathers(ExecPlan& exec, const ExecPassOptions& options) {
  if (options.prefetch_depth <= 0 || exec.num_devices < 2) return {};
  Prefetcher prefetcher(exec, options);
  prefetcher.scan();
  prefetcher.place();
  prefetcher.keep_ordered();
  return prefetcher.rewrite();
}

}  // namespace loom::exec
