#include "fold_segments.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "loom/core/both_cores.h"
#include "loom/exec/instruction_buffers.h"

namespace loom::exec {
namespace {

constexpr int kUnknown = -3;

class Classifier {
 public:
  Classifier(const ExecPlan& slice, const FoldShape& shape) : slice_(slice), shape_(shape) {}

  std::vector<int> program(int device) const {
    const auto& program = slice_.programs[static_cast<std::size_t>(device)];
    std::vector<int> seg(program.size(), kUnknown);
    computes(program, seg);
    scatters(program, seg);
    consumers(program, seg);
    producers(program, seg);
    return seg;
  }

 private:
  // Computes by their sub-op; those without a stage take the block around them.
  void computes(const std::vector<Instruction>& program, std::vector<int>& seg) const {
    const plan::Plan& plan = *slice_.plan;
    std::unordered_set<std::uint32_t> ran;  // sub-ops already run once (a second run is a recomputation)
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (c == nullptr) {
        if (std::holds_alternative<Load>(program[i])) seg[i] = kPrologue;
        continue;
      }
      const ir::Op& op = plan.op_of(c->sub_op);
      const bool again = !ran.insert(c->sub_op.index()).second;
      if (op.pass == ir::Pass::optimizer) {
        seg[i] = kEpilogue;
      } else if (const int stage = stage_of(op); stage >= 0) {
        seg[i] = block_segment(stage / shape_.pp, op.pass == ir::Pass::backward || again);
      }
    }
    // Without a stage (a gradient accumulation): the block of its first reader, else the block around.
    std::unordered_map<std::uint32_t, int> first_reader;
    for (std::size_t i = program.size(); i-- > 0;) {
      const auto* c = std::get_if<Compute>(&program[i]);
      if (c == nullptr) continue;
      if (seg[i] == kUnknown)
        for (BufferId b : c->outputs)
          if (const auto it = first_reader.find(b.index()); it != first_reader.end() && is_block(it->second)) seg[i] = it->second;
      if (is_block(seg[i]))
        for (BufferId b : c->inputs)
          if (b.valid()) first_reader[b.index()] = seg[i];
    }
    int around = kUnknown;  // the last block seen, then (second sweep) the next one
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (is_block(seg[i])) around = seg[i];
      else if (seg[i] == kUnknown && std::holds_alternative<Compute>(program[i]) && around != kUnknown) seg[i] = around;
    }
    around = kUnknown;
    for (std::size_t i = program.size(); i-- > 0;) {
      if (is_block(seg[i])) around = seg[i];
      else if (seg[i] == kUnknown && std::holds_alternative<Compute>(program[i])) seg[i] = around == kUnknown ? kEpilogue : around;
    }
  }

  int stage_of(const ir::Op& op) const {
    const ir::OpId forward = op.pass == ir::Pass::backward ? op.mirror_of : op.id;
    if (!forward.valid() || forward.index() >= shape_.op_stage.size()) return -1;
    return shape_.op_stage[forward.index()];
  }

  // With shape.scatter_per_micro_batch: a reduce-scatter reading what a block computed (directly or
  // through locals) runs in that block.
  void scatters(const std::vector<Instruction>& program, std::vector<int>& seg) const {
    if (!shape_.scatter_per_micro_batch) return;
    std::unordered_map<std::uint32_t, int> origin;  // buffer -> the block whose compute it comes from
    for (std::size_t i = 0; i < program.size(); ++i) {
      const Instruction& in = program[i];
      int from = is_block(seg[i]) ? seg[i] : kUnknown;
      if (from == kUnknown && (std::holds_alternative<Local>(in) || is_collective_call(in)))
        for_each_read(in, [&](BufferId b) {
          if (const auto it = origin.find(b.index()); from == kUnknown && it != origin.end()) from = it->second;
        });
      const auto call = collective_call(in);
      if (seg[i] == kUnknown && call && call->kind == comm::Primitive::reduce_scatter && from != kUnknown) seg[i] = from;
      if (from != kUnknown) for_each_written(in, [&](BufferId b) { origin[b.index()] = from; });
    }
  }

  // Collectives, recvs and locals where their output is first read (walking back from the end).
  static void consumers(const std::vector<Instruction>& program, std::vector<int>& seg) {
    std::unordered_map<std::uint32_t, int> first_reader;
    for (std::size_t i = program.size(); i-- > 0;) {
      const Instruction& in = program[i];
      if (seg[i] == kUnknown && (is_collective_call(in) || std::holds_alternative<Recv>(in) ||
                                 std::holds_alternative<Local>(in))) {
        for_each_written(in, [&](BufferId b) {
          if (const auto it = first_reader.find(b.index()); it != first_reader.end()) seg[i] = it->second;
        });
      }
      if (seg[i] != kUnknown)
        for_each_read(in, [&](BufferId b) {
          if (b.valid()) first_reader[b.index()] = seg[i];
        });
    }
  }

  // The rest with what wrote their input (sends, unread outputs); a wait with its start; frees with the
  // instruction before.
  static void producers(const std::vector<Instruction>& program, std::vector<int>& seg) {
    std::unordered_map<std::uint32_t, int> writer;
    std::unordered_map<std::int64_t, int> started;  // by tag: the segment of this device's start
    int before = kPrologue;
    for (std::size_t i = 0; i < program.size(); ++i) {
      const Instruction& in = program[i];
      if (std::holds_alternative<Free>(in)) {
        seg[i] = before;
        continue;
      }
      if (const auto* w = std::get_if<CollectiveWait>(&in)) {
        const auto it = started.find(w->tag);
        seg[i] = it != started.end() ? it->second : before;
        before = seg[i];
        continue;
      }
      if (seg[i] == kUnknown) {
        for_each_read(in, [&](BufferId b) {
          if (const auto it = writer.find(b.index()); seg[i] == kUnknown && it != writer.end()) seg[i] = it->second;
        });
        // A recv nobody reads this step delivers next step's copy (step closing): once, at the end.
        if (seg[i] == kUnknown) seg[i] = std::holds_alternative<Recv>(in) ? kEpilogue : before;
      }
      for_each_written(in, [&](BufferId b) { writer[b.index()] = seg[i]; });
      if (const auto* start = std::get_if<CollectiveStart>(&in)) started[start->tag] = seg[i];
      before = seg[i];
    }
  }

  const ExecPlan& slice_;
  const FoldShape& shape_;
};

// Whether an instruction in a block after position `at` reads what the instruction at `at` writes.
bool read_in_a_block(const std::vector<Instruction>& program, const std::vector<int>& seg, std::size_t at) {
  std::unordered_set<std::uint32_t> written;
  for_each_written(program[at], [&](BufferId b) { written.insert(b.index()); });
  bool read = false;
  for (std::size_t i = at + 1; i < program.size() && !read; ++i)
    if (is_block(seg[i]) && !std::holds_alternative<Free>(program[i]))
      for_each_read(program[i], [&](BufferId b) { read = read || written.contains(b.index()); });
  return read;
}

// Walking back: a local or blocking collective in a block whose outputs are read, and only by instructions
// that run once per step (the epilogue), runs once per step too, reading the accumulated input. Not a
// reduce-scatter the shape runs per micro-batch (ZeRO-2 and -3 scatter each micro-batch's gradient).
void settle_once_per_step(const std::vector<Instruction>& program, std::vector<int>& seg, bool scatter_per_micro_batch) {
  std::unordered_map<std::uint32_t, int> readers;  // buffer -> 1: read only in the epilogue so far, 0: else
  for (std::size_t i = program.size(); i-- > 0;) {
    const Instruction& in = program[i];
    if (std::holds_alternative<Free>(in)) continue;
    const auto* collective = std::get_if<Collective>(&in);
    const bool pinned = collective != nullptr && scatter_per_micro_batch &&
                        collective->kind == comm::Primitive::reduce_scatter;
    if (is_block(seg[i]) && !pinned && (std::holds_alternative<Local>(in) || collective != nullptr)) {
      bool once = true;
      for_each_written(in, [&](BufferId b) {
        const auto it = readers.find(b.index());
        once = once && it != readers.end() && it->second == 1;
      });
      if (once) seg[i] = kEpilogue;
    }
    for_each_read(in, [&](BufferId b) {
      const auto [it, fresh] = readers.emplace(b.index(), seg[i] == kEpilogue ? 1 : 0);
      if (!fresh && seg[i] != kEpilogue) it->second = 0;
    });
  }
}

// Where a send's recv runs once, the send runs once: an epilogue send reads the accumulated gradient;
// a recv in a block of data sent once (in the prologue) receives it once. Collective members must agree.
Expected<void> agree(const ExecPlan& slice, const FoldShape& shape, std::vector<std::vector<int>>& seg) {
  std::map<std::tuple<int, int, std::int64_t>, std::size_t> recv_at;  // (src, dst, tag) -> position
  std::map<std::int64_t, std::vector<std::pair<int, std::size_t>>> members;
  for (int d = 0; d < slice.num_devices; ++d) {
    const auto& program = slice.programs[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < program.size(); ++i) {
      if (const auto* r = std::get_if<Recv>(&program[i])) recv_at[{r->peer, d, r->tag}] = i;
      if (const auto c = collective_call(program[i])) members[c->tag].emplace_back(d, i);
    }
  }
  for (int d = 0; d < slice.num_devices; ++d) {
    const auto& program = slice.programs[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < program.size(); ++i) {
      const auto* s = std::get_if<Send>(&program[i]);
      if (s == nullptr) continue;
      const auto it = recv_at.find({d, s->peer, s->tag});
      if (it == recv_at.end())
        return fail(fmt::format("device {}'s send #{} to device {} has no recv", d, s->tag, s->peer));
      int& mine = seg[static_cast<std::size_t>(d)][i];
      int& theirs = seg[static_cast<std::size_t>(s->peer)][it->second];
      if (is_block(mine) == is_block(theirs)) continue;
      if (is_block(mine) && theirs == kEpilogue) mine = kEpilogue;
      else if (mine == kPrologue && is_block(theirs)) theirs = kPrologue;
      else
        return fail(fmt::format("transfer #{} from device {} to device {} runs once per step on one side and once per "
                                "micro-batch on the other",
                                s->tag, d, s->peer),
                    "plan this job without folding (--fold off)");
    }
  }
  // A send made once per step above takes along what only feeds it: a slice of a reduce-scatter's output sent
  // to the next node (ZeRO across nodes: the scatter within the node, then sends), and the scatter itself.
  for_each_on_both_cores(seg.size(), [&](std::size_t d) {
    settle_once_per_step(slice.programs[d], seg[d], shape.scatter_per_micro_batch);
  });
  for (const auto& [tag, sites] : members) {
    // A member that runs it once per step where another runs it per micro-batch: a contributor whose output
    // is not read in a block (a reduction's sender across nodes) classed by its block-computed input. It
    // runs once, in the epilogue, reading the accumulated input, as its peers do.
    const auto once = [&](const std::pair<int, std::size_t>& site) {
      return seg[static_cast<std::size_t>(site.first)][site.second] == kEpilogue;
    };
    if (std::ranges::any_of(sites, once))
      for (const auto& [d, i] : sites) {
        std::vector<int>& mine = seg[static_cast<std::size_t>(d)];
        const auto& program = slice.programs[static_cast<std::size_t>(d)];
        if (!is_block(mine[i]) || read_in_a_block(program, mine, i)) continue;  // else: refused below
        mine[i] = kEpilogue;
        for (std::size_t w = i + 1; w < program.size(); ++w)  // a start's wait goes with it
          if (const auto* wait = std::get_if<CollectiveWait>(&program[w]); wait != nullptr && wait->tag == tag)
            mine[w] = kEpilogue;
      }
    const bool repeated = is_block(seg[static_cast<std::size_t>(sites.front().first)][sites.front().second]);
    for (const auto& [d, i] : sites)
      if (is_block(seg[static_cast<std::size_t>(d)][i]) != repeated)
        return fail(fmt::format("collective #{} runs once per micro-batch on device {} but once per step on device {}",
                                tag, repeated ? sites.front().first : d, repeated ? d : sites.front().first),
                    "plan this job without folding (--fold off)");
  }
  return {};
}

}  // namespace

Expected<std::vector<std::vector<int>>> fold_segments(const ExecPlan& slice, const FoldShape& shape) {
  const Classifier classify(slice, shape);
  // Each program is classified on its own (both cores: ZeRO's slice holds every replica's program).
  std::vector<std::vector<int>> seg(slice.programs.size());
  for_each_on_both_cores(seg.size(), [&](std::size_t d) { seg[d] = classify.program(static_cast<int>(d)); });
  LOOM_RETURN_IF_ERROR(agree(slice, shape, seg));
  return seg;
}

}  // namespace loom::exec
