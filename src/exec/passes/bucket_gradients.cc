// bucket_gradients (exec/passes.h): parameter-gradient all-reduces become DDP's asynchronous buckets.
#include <algorithm>
#include <map>
#include <set>
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

// One parameter gradient's blocking all-reduce on one device.
struct Reduction {
  std::size_t ready = 0;       // the instruction writing its input: the gradient part is final after it
  std::size_t place = 0;       // the all-reduce
  std::size_t first_use = 0;   // the first instruction after it reading or freeing its output
  BufferId input, output;
  std::int64_t tag = 0;
  std::vector<int> group;      // ascending
  std::int64_t bytes = 0;
  ir::DType dtype = ir::DType::f32;
  bool valid = true;
};

// The all-reduces of parameter gradients whose input and output hold one box, the output whole (the
// members' boxes are compared by the caller), in program order.
std::vector<Reduction> reductions_of(const ExecPlan& exec, const std::vector<Instruction>& program) {
  const ir::Graph& graph = *exec.plan->graph;
  const auto whole_parameter_gradient = [&](const Collective& c) {
    const plan::SubTensor& in = exec.buffer(c.input).piece;
    const plan::SubTensor& out = exec.buffer(c.output).piece;
    return ir::is_parameter_gradient(graph, out.tensor) && out.value.is_whole() && plan::same_piece(in, out, false);
  };
  std::vector<Reduction> found;
  for (const detail::BlockingAllReduce& a : detail::blocking_all_reduces(program, whole_parameter_gradient, false)) {
    const Collective& c = *a.collective;
    Reduction r{.ready = a.ready, .place = a.place, .first_use = a.first_use, .input = c.input, .output = c.output,
                .tag = c.tag, .group = c.group, .bytes = exec.buffer(c.output).bytes,
                .dtype = graph.tensor(exec.buffer(c.output).piece.tensor).dtype, .valid = true};
    std::ranges::sort(r.group);
    found.push_back(std::move(r));
  }
  // A gradient finalized by another bucketed reduction has no instruction to start after: left blocking.
  std::unordered_set<std::size_t> places;
  for (const Reduction& r : found) places.insert(r.place);
  for (Reduction& r : found)
    if (places.contains(r.ready)) r.valid = false;
  return found;
}

// DDP's assignment: consecutive reductions (in the order their gradients become final) over one group
// and dtype; a bucket takes gradients until it holds `cap` bytes or more (its group's first bucket:
// `first_cap`), and only gradients final before the first of its outputs is used.
std::vector<std::vector<const Reduction*>> buckets_of(const std::vector<Reduction>& reductions, std::int64_t cap,
                                                      std::int64_t first_cap) {
  std::vector<const Reduction*> order;
  for (const Reduction& r : reductions)
    if (r.valid) order.push_back(&r);
  std::ranges::stable_sort(order, [](const Reduction* a, const Reduction* b) {
    return std::tie(a->ready, a->place) < std::tie(b->ready, b->place);
  });
  std::vector<std::vector<const Reduction*>> buckets;
  std::set<std::vector<int>> closed;  // groups with a closed bucket: their next ones are not the first
  std::int64_t bytes = 0;
  std::size_t first_use = 0;
  for (const Reduction* r : order) {
    if (!buckets.empty()) {
      const Reduction& head = *buckets.back().front();
      const bool first = !closed.contains(head.group);
      if (head.group == r->group && head.dtype == r->dtype && bytes < (first ? first_cap : cap) && r->ready < first_use) {
        buckets.back().push_back(r);
        bytes += r->bytes;
        first_use = std::min(first_use, r->first_use);
        continue;
      }
      closed.insert(head.group);
    }
    buckets.push_back({r});
    bytes = r->bytes;
    first_use = r->first_use;
  }
  return buckets;
}

// A bucket on one device: where it starts and where it is waited for.
struct Bucket {
  std::vector<const Reduction*> members;
  std::size_t start = 0;  // after this instruction
  std::size_t wait = 0;   // before this one (the program's size: at the end)
  int order = 0;          // among the device's buckets starting after one instruction
  std::int64_t name = 0;  // shared by the members' buckets of the same reductions
};

class Bucketer {
 public:
  Bucketer(ExecPlan& exec, const ExecPassOptions& options) : exec_(exec), options_(options) {}

  // Per device with a program, its reductions; `replicas_only`: a folded step's, where only groups of
  // images of the device's own slice device (data-parallel replicas) can be bucketed.
  void scan(const FoldShape* replicas_only) {
    reductions_.resize(exec_.programs.size());
    // Each device's scan reads the plan and writes its own entry: on both cores, the serial loop's result.
    for_each_on_both_cores(exec_.programs.size(), [&](std::size_t d) {
      reductions_[d] = reductions_of(exec_, exec_.programs[d]);
      if (replicas_only == nullptr) return;
      const int slice = slice_device_of(*replicas_only, static_cast<int>(d));
      for (Reduction& r : reductions_[d])
        if (!std::ranges::all_of(r.group, [&](int m) { return slice_device_of(*replicas_only, m) == slice; })) r.valid = false;
    });
    if (replicas_only == nullptr) keep_agreed();
  }

  // Buckets per device, named by their reductions' tags (equal names: the same bucket on two members).
  void assign() {
    buckets_.resize(exec_.programs.size());
    std::map<std::vector<std::int64_t>, std::int64_t> names;
    for (std::size_t d = 0; d < exec_.programs.size(); ++d) {
      std::map<std::size_t, int> at_start;
      for (auto& members : buckets_of(reductions_[d], options_.bucket_bytes, options_.first_bucket_bytes)) {
        Bucket b{.members = std::move(members), .start = 0, .wait = exec_.programs[d].size(), .order = 0, .name = 0};
        std::vector<std::int64_t> tags;
        for (const Reduction* r : b.members) {
          b.start = std::max(b.start, r->ready);
          b.wait = std::min(b.wait, r->first_use);
          tags.push_back(r->tag);
        }
        b.order = 1 + at_start[b.start]++;
        b.name = names.try_emplace(std::move(tags), -2 - static_cast<std::int64_t>(names.size())).first->second;
        buckets_[d].push_back(std::move(b));
      }
    }
  }

  // Drops the buckets of groups whose members would issue their collectives in different orders.
  void keep_ordered() {
    std::unordered_set<std::int64_t> bucketed;
    std::vector<std::vector<Issue>> started(buckets_.size());
    for (std::size_t d = 0; d < buckets_.size(); ++d)
      for (const Bucket& b : buckets_[d]) {
        for (const Reduction* r : b.members) bucketed.insert(r->tag);
        started[d].push_back(Issue{b.start, b.order, b.name, b.members.front()->group});
      }
    const std::set<std::vector<int>> disordered = detail::groups_out_of_order_after(exec_, bucketed, std::move(started));
    for (auto& buckets : buckets_)
      std::erase_if(buckets, [&](const Bucket& b) { return disordered.contains(b.members.front()->group); });
  }

  ExecPassStats rewrite() {
    ExecPassStats stats;
    std::map<std::int64_t, std::int64_t> tag_of;  // bucket name -> its tag
    for (std::size_t d = 0; d < exec_.programs.size(); ++d) {
      auto& program = exec_.programs[d];
      ProgramEdit edit;
      std::unordered_set<std::uint32_t> refreed;
      for (const Bucket& b : buckets_[d]) {
        const auto describe = [](std::size_t n, std::int64_t bytes) {
          return fmt::format("gradient bucket: all-reduce of {} gradients ({} B)", n, bytes);
        };
        const auto [tag, added] = detail::start_tag(exec_, tag_of, b.name, b.members, describe);
        if (added) {
          ++stats.buckets;
          stats.bucketed_reductions += static_cast<int>(b.members.size());
        }
        edit.insert_after(b.start, detail::start_replacing(comm::Primitive::all_reduce, tag, b.members, edit));
        for (const Reduction* r : b.members) refreed.insert(r->input.value);  // freed after the start reads it
        if (b.wait < program.size()) edit.insert_before(b.wait, CollectiveWait{tag});
        else edit.insert_after(program.size() - 1, CollectiveWait{tag});
      }
      if (!edit.empty()) std::move(edit).apply(program, {}, refreed);
    }
    return stats;
  }

 private:
  // A reduction is bucketed only where every member of its group buckets it (the same tag); until stable.
  void keep_agreed() {
    detail::keep_agreed_by_all_members(reductions_);
    // Members agree on the boxes: every member's input and output of the tag hold one box.
    std::unordered_map<std::int64_t, const plan::SubTensor*> box;
    for (auto& reductions : reductions_)
      for (Reduction& r : reductions) {
        if (!r.valid) continue;
        const plan::SubTensor& out = exec_.buffer(r.output).piece;
        const auto [it, fresh] = box.try_emplace(r.tag, &out);
        if (!fresh && !plan::same_piece(*it->second, out, false)) bad_.insert(r.tag);
      }
    for (auto& reductions : reductions_)
      for (Reduction& r : reductions)
        if (bad_.contains(r.tag)) r.valid = false;
  }

  ExecPlan& exec_;
  const ExecPassOptions& options_;
  std::vector<std::vector<Reduction>> reductions_;  // by device
  std::vector<std::vector<Bucket>> buckets_;        // by device
  std::unordered_set<std::int64_t> bad_;
};

ExecPassStats bucket(ExecPlan& exec, const ExecPassOptions& options, const FoldShape* replicas_only) {
  if (options.bucket_bytes <= 0 || exec.num_devices < 2) return {};
  Bucketer bucketer(exec, options);
  bucketer.scan(replicas_only);
  bucketer.assign();
  if (replicas_only == nullptr) bucketer.keep_ordered();  // a folded step's replicas run one program
  return bucketer.rewrite();
}

}  // namespace

ExecPassStats bucket_gradients(ExecPlan& exec, const ExecPassOptions& options) { return bucket(exec, options, nullptr); }

ExecPassStats bucket_gradients(FoldedStep& folded, const ExecPassOptions& options) {
  return bucket(folded.step, options, &folded.shape);
}

}  // namespace loom::exec
