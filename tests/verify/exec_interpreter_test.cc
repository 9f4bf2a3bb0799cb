// The ExecPlan interpreter on hand-built programs for a two-device data-parallel training step of the MLP
// fixture (tests/plan/plan_test_graph.h): the weight gradients reach the replicated AdamW steps through
// each kind of instruction (all-reduce; send/recv and combine; reduce-scatter and all-gather; scale; slice
// of whole leaves; combine's fallback rule), and every run must equal the single-device run. Planted
// mistakes (a wrong group, a missing member, a recv of the wrong piece, ...) must be caught.
#include "loom/verify/exec_interpreter.h"

#include <gtest/gtest.h>

#include <numeric>

#include "../plan/plan_test_graph.h"
#include "loom/exec/exec_text.h"
#include "loom/plan/validate.h"
#include "loom/verify/graph_interpreter.h"
#include "random_plans.h"

namespace loom::verify {
namespace {

using exec::BufferId;
using exec::Instruction;
using exec::kNoBuffer;
using plan::Plan;
using plan::SubTensor;
using plan::ValuePart;
using plan::testing::graph;

constexpr int kDevices = 2;

const Plan& data_parallel_plan() {
  static const Plan plan = [] {
    auto p = testing::data_parallel(graph(), kDevices);
    EXPECT_TRUE(p) << p.error().to_string();
    return p.value_or(Plan{});
  }();
  return plan;
}

// How the two devices' weight-gradient value parts ("k of 2", whole box) become the whole gradient
// each optimizer replica reads.
enum class GradientPath {
  all_reduce,
  send_recv_combine,          // each sends its part to the other and combines both
  reduce_scatter_all_gather,  // half the rows each, then gathered
  scale,                      // all-reduce, scale to "k of 2" (whole / 2), all-reduce again
  combine_fallback,           // combines into thirds (no part tiles a third: the whole rule), then whole
  start_wait,                 // an asynchronous all-reduce: started, its part freed at once, then waited for
  gather_start,               // reduce-scatter, then the rows gathered by an asynchronous all-gather
};

// Builds the ExecPlan of data_parallel_plan() in its completed global order, recording which buffer holds
// which piece on each device.
class Builder {
 public:
  explicit Builder(GradientPath path, bool slice_leaves = false)
      : plan_(data_parallel_plan()), path_(path), slice_leaves_(slice_leaves) {
    exec_.plan = &plan_;
    exec_.num_devices = kDevices;
    exec_.programs.resize(kDevices);
    held_.resize(kDevices);
  }

  exec::ExecPlan build() && {
    auto order = plan::complete_order(plan_, kDevices);
    EXPECT_TRUE(order) << order.error().to_string();
    if (order)
      for (plan::SubOpId id : order->global) compute(plan_.sub_op(id));
    return std::move(exec_);
  }

 private:
  BufferId buffer(int d, const SubTensor& piece) {
    const BufferId id = exec_.add_buffer(d, piece, piece.numel() * 4);
    held_[static_cast<std::size_t>(d)].push_back(id);
    return id;
  }
  void emit(int d, Instruction instruction) { exec_.programs[static_cast<std::size_t>(d)].push_back(std::move(instruction)); }
  BufferId held(int d, const SubTensor& piece) const {
    for (BufferId id : held_[static_cast<std::size_t>(d)])
      if (exec_.buffer(id).piece == piece) return id;
    return kNoBuffer;
  }
  std::int64_t tag() { return next_tag_++; }

  void compute(const plan::SubOp& s) {
    const bool mirror = plan_.op_of(s.id).is_mirror();
    exec::Compute c{s.id, {}, {}};
    for (std::size_t i = 0; i < s.inputs.size(); ++i)
      c.inputs.push_back(!mirror && plan_.layouts[s.op.index()].shape_only(i) ? kNoBuffer : input(s.device, s.inputs[i]));
    for (const SubTensor& out : s.outputs) c.outputs.push_back(buffer(s.device, out));
    emit(s.device, std::move(c));
  }

  BufferId input(int d, const SubTensor& piece) {
    if (BufferId id = held(d, piece); id.valid()) return id;
    if (plan_.graph->tensor(piece.tensor).role != ir::TensorRole::gradient) return load(d, piece);
    gradient(piece);  // both devices at once, as a collective must be
    return held(d, piece);
  }

  BufferId load(int d, const SubTensor& piece) {
    const SubTensor whole = SubTensor::whole(piece.tensor, plan_.graph->tensor(piece.tensor).shape);
    if (!slice_leaves_ || whole == piece) {
      const BufferId id = buffer(d, piece);
      emit(d, exec::Load{id});
      return id;
    }
    const BufferId all = held(d, whole).valid() ? held(d, whole) : load(d, whole);
    const BufferId id = buffer(d, piece);
    emit(d, exec::Local{exec::LocalKind::slice, {all}, id});
    return id;
  }

  SubTensor part(const SubTensor& whole, std::int64_t k, std::int64_t n) const {
    SubTensor p = whole;
    p.value = ValuePart{k, n};
    return p;
  }
  SubTensor rows(const SubTensor& whole, int k) const {  // half k of dim 0
    SubTensor r = whole;
    r.box[0] = plan::split_range(whole.box[0], kDevices, k, false);
    return r;
  }

  // One collective over both devices: inputs[k] on device k, each writing a new buffer of outputs[k].
  void collective(comm::Primitive kind, const std::vector<BufferId>& inputs, const std::vector<SubTensor>& outputs) {
    const std::int64_t t = tag();
    for (int k = 0; k < kDevices; ++k)
      emit(k, exec::Collective{kind, {0, 1}, t, inputs[static_cast<std::size_t>(k)], buffer(k, outputs[static_cast<std::size_t>(k)])});
  }
  std::vector<BufferId> parts_of(const SubTensor& whole, std::int64_t n) const {
    std::vector<BufferId> ids;
    for (int k = 0; k < kDevices; ++k) ids.push_back(held(k, part(whole, k, n)));
    return ids;
  }
  // Sends `piece` from device `from` to `to` and returns the receiving buffer.
  BufferId move(int from, int to, const SubTensor& piece) {
    const std::int64_t t = tag();
    emit(from, exec::Send{to, t, held(from, piece)});
    const BufferId got = buffer(to, piece);
    emit(to, exec::Recv{from, t, got});
    return got;
  }
  void combine(int d, std::vector<BufferId> inputs, const SubTensor& output) {
    emit(d, exec::Local{exec::LocalKind::combine, std::move(inputs), buffer(d, output)});
  }

  // Makes the whole gradient `whole` on both devices from their parts "k of 2".
  void gradient(const SubTensor& whole) {
    const std::vector<SubTensor> both(kDevices, whole);
    switch (path_) {
      case GradientPath::all_reduce: return collective(comm::Primitive::all_reduce, parts_of(whole, 2), both);
      case GradientPath::send_recv_combine: {
        const BufferId to1 = move(0, 1, part(whole, 0, 2)), to0 = move(1, 0, part(whole, 1, 2));
        combine(0, {held(0, part(whole, 0, 2)), to0}, whole);
        return combine(1, {to1, held(1, part(whole, 1, 2))}, whole);
      }
      case GradientPath::reduce_scatter_all_gather: {
        collective(comm::Primitive::reduce_scatter, parts_of(whole, 2), {rows(whole, 0), rows(whole, 1)});
        return collective(comm::Primitive::all_gather, {held(0, rows(whole, 0)), held(1, rows(whole, 1))}, both);
      }
      case GradientPath::scale: {
        collective(comm::Primitive::all_reduce, parts_of(whole, 2), both);
        std::vector<BufferId> halves;
        for (int k = 0; k < kDevices; ++k) {
          // Not recorded in held(): the part "k of 2" there stays the one the backward computed.
          halves.push_back(exec_.add_buffer(k, part(whole, k, 2), whole.numel() * 4));
          emit(k, exec::Local{exec::LocalKind::scale, {held(k, whole)}, halves.back()});
          std::erase(held_[static_cast<std::size_t>(k)], held(k, whole));  // the optimizer reads the second sum
        }
        return collective(comm::Primitive::all_reduce, halves, both);
      }
      case GradientPath::start_wait: {
        const std::int64_t t = tag();
        for (int k = 0; k < kDevices; ++k) {
          const BufferId mine = held(k, part(whole, k, 2));
          emit(k, exec::CollectiveStart{comm::Primitive::all_reduce, {0, 1}, t, {mine}, {buffer(k, whole)}});
          emit(k, exec::Free{mine});  // the start read it: device 0 frees it before device 1 starts
          emit(k, exec::CollectiveWait{t});
        }
        return;
      }
      case GradientPath::gather_start: {
        collective(comm::Primitive::reduce_scatter, parts_of(whole, 2), {rows(whole, 0), rows(whole, 1)});
        const std::int64_t t = tag();
        for (int k = 0; k < kDevices; ++k) {
          const BufferId mine = held(k, rows(whole, k));
          emit(k, exec::CollectiveStart{comm::Primitive::all_gather, {0, 1}, t, {mine}, {buffer(k, whole)}});
          emit(k, exec::Free{mine});
          emit(k, exec::CollectiveWait{t});
        }
        return;
      }
      case GradientPath::combine_fallback: {
        const BufferId to1 = move(0, 1, part(whole, 0, 2)), to0 = move(1, 0, part(whole, 1, 2));
        const BufferId own0 = held(0, part(whole, 0, 2)), own1 = held(1, part(whole, 1, 2));
        combine(0, {own0, to0}, part(whole, 0, 3));  // [0, 1/3): no input tiles it, so (p0 + p1) / 3
        combine(0, {own0, to0}, part(whole, 2, 3));
        combine(1, {to1, own1}, part(whole, 1, 3));
        const BufferId third1 = move(1, 0, part(whole, 1, 3));
        const BufferId third0 = move(0, 1, part(whole, 0, 3)), third2 = move(0, 1, part(whole, 2, 3));
        combine(0, {held(0, part(whole, 0, 3)), third1, held(0, part(whole, 2, 3))}, whole);
        return combine(1, {third0, held(1, part(whole, 1, 3)), third2}, whole);
      }
    }
  }

  const Plan& plan_;
  GradientPath path_;
  bool slice_leaves_;
  exec::ExecPlan exec_;
  std::vector<std::vector<BufferId>> held_;  // by device: buffers written, in order
  std::int64_t next_tag_ = 0;
};

struct Result {
  Expected<ExecRun> run;
  RunComparison comparison;
};

Result run(const exec::ExecPlan& exec) {
  const std::vector<NdArray> initial = initial_values(graph(), 7);
  auto reference = run_graph(graph(), initial);
  EXPECT_TRUE(reference) << reference.error().to_string();
  Result result{run_exec_plan(exec, initial), {}};
  if (!result.run) return result;
  auto c = compare_runs(graph(), *reference, result.run->values);
  EXPECT_TRUE(c) << c.error().to_string();
  if (c) result.comparison = *c;
  return result;
}

void expect_equal_to_single_device(const exec::ExecPlan& exec) {
  const Result r = run(exec);
  ASSERT_TRUE(r.run) << r.run.error().to_string() << "\n" << testing::programs_text(exec);
  EXPECT_LT(r.comparison.overall.max_rel, 1e-9) << r.comparison.overall.worst << "\n" << testing::programs_text(exec);
  EXPECT_LT(r.comparison.updated.max_rel, 1e-9);  // the optimizer steps saw the whole gradients
}

std::size_t count(const exec::ExecPlan& exec, auto predicate) {
  std::size_t n = 0;
  for (const auto& program : exec.programs) n += static_cast<std::size_t>(std::count_if(program.begin(), program.end(), predicate));
  return n;
}

TEST(ExecInterpreter, DataParallelAllReduceEqualsSingleDevice) {
  const exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  EXPECT_EQ(count(exec, [](const Instruction& i) { return std::holds_alternative<exec::Collective>(i); }), 8u);  // 4 gradients x 2
  expect_equal_to_single_device(exec);
}

TEST(ExecInterpreter, SendRecvCombineEqualsSingleDevice) {
  expect_equal_to_single_device(Builder(GradientPath::send_recv_combine).build());
}

TEST(ExecInterpreter, ReduceScatterAllGatherEqualsSingleDevice) {
  expect_equal_to_single_device(Builder(GradientPath::reduce_scatter_all_gather).build());
}

TEST(ExecInterpreter, ScaleAndSlicedLeavesEqualSingleDevice) {
  const exec::ExecPlan exec = Builder(GradientPath::scale, /*slice_leaves=*/true).build();
  const auto is_slice = [](const Instruction& i) {
    return std::holds_alternative<exec::Local>(i) && std::get<exec::Local>(i).kind == exec::LocalKind::slice;
  };
  EXPECT_GT(count(exec, is_slice), 0u);
  expect_equal_to_single_device(exec);
}

TEST(ExecInterpreter, StartAndWaitEqualSingleDevice) {
  const exec::ExecPlan exec = Builder(GradientPath::start_wait).build();
  EXPECT_EQ(count(exec, [](const Instruction& i) { return std::holds_alternative<exec::CollectiveStart>(i); }), 8u);
  expect_equal_to_single_device(exec);
}

TEST(ExecInterpreter, GatherStartEqualsSingleDevice) {
  const exec::ExecPlan exec = Builder(GradientPath::gather_start).build();
  EXPECT_EQ(count(exec, [](const Instruction& i) { return std::holds_alternative<exec::CollectiveStart>(i); }), 8u);
  expect_equal_to_single_device(exec);
}

TEST(ExecInterpreter, CombineFallsBackToTheWholeTimesTheOutputFraction) {
  expect_equal_to_single_device(Builder(GradientPath::combine_fallback).build());
}

// --- planted mistakes --------------------------------------------------------------------------

// The first instruction of `device` satisfying `predicate`.
template <class T>
T& first(exec::ExecPlan& exec, int device, auto predicate) {
  for (Instruction& i : exec.programs[static_cast<std::size_t>(device)])
    if (auto* t = std::get_if<T>(&i); t != nullptr && predicate(*t)) return *t;
  ADD_FAILURE() << "no such instruction on device " << device;
  static T none;
  return none;
}

void expect_error(const exec::ExecPlan& exec, const std::vector<std::string>& fragments) {
  const Result r = run(exec);
  ASSERT_FALSE(r.run) << "ran; worst rel " << r.comparison.overall.max_rel << "\n" << testing::programs_text(exec);
  const std::string message = r.run.error().to_string();
  for (const std::string& f : fragments) EXPECT_NE(message.find(f), std::string::npos) << f << " in\n" << message;
}

TEST(ExecInterpreter, AllReduceOverTheWrongGroupIsAMismatch) {
  // Each device "all-reduces" alone (groups {0} and {1}, distinct tags): its own part, labelled whole.
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  for (int d = 0; d < kDevices; ++d)
    for (Instruction& i : exec.programs[static_cast<std::size_t>(d)])
      if (auto* c = std::get_if<exec::Collective>(&i)) {
        c->group = {d};
        c->tag = 2 * c->tag + d;
      }
  const Result r = run(exec);
  ASSERT_TRUE(r.run) << r.run.error().to_string();
  EXPECT_GT(r.comparison.updated.max_rel, 1e-6);
  EXPECT_LT(r.comparison.gradient.max_rel, 1e-9);  // the gradients themselves are assembled from the computes
}

TEST(ExecInterpreter, AMemberMissingItsCollectiveIsAnError) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  auto& program = exec.programs[1];
  program.erase(std::ranges::find_if(program, [](const Instruction& i) { return std::holds_alternative<exec::Collective>(i); }));
  expect_error(exec, {"device 1 instruction", "fc1.weight.adamw[1/2]", "is read before it is written"});
}

TEST(ExecInterpreter, CollectivesInDifferentOrdersDeadlock) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  std::swap(first<exec::Collective>(exec, 1, [](const exec::Collective& c) { return c.tag == 0; }).tag,
            first<exec::Collective>(exec, 1, [](const exec::Collective& c) { return c.tag == 1; }).tag);
  expect_error(exec, {"deadlocks", "device 0 instruction 15 (all-reduce #0",
                      "waits for the other members, but device 1 instruction 15 (all-reduce #1"});
}

TEST(ExecInterpreter, MembersDisagreeingOnTheGroupOrContributingAnotherDevicesBufferAreErrors) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  first<exec::Collective>(exec, 1, [](const exec::Collective& c) { return c.tag == 0; }).group = {1, 0};
  expect_error(exec, {"members disagree on tag 0", "device 0 instruction 15", "all-reduce over [0, 1]"});

  exec::ExecPlan swapped = Builder(GradientPath::all_reduce).build();
  auto& c0 = first<exec::Collective>(swapped, 0, [](const exec::Collective& c) { return c.tag == 0; });
  auto& c1 = first<exec::Collective>(swapped, 1, [](const exec::Collective& c) { return c.tag == 0; });
  std::swap(c0.input, c1.input);
  expect_error(swapped, {"is held by device 1, not 0", "all-reduce #0"});
}

TEST(ExecInterpreter, AWaitForAStartSomeMemberNeverRunsDeadlocks) {
  // Device 1 starts (and waits for) tag 99 where device 0 starts tag 0: neither collective completes.
  exec::ExecPlan exec = Builder(GradientPath::start_wait).build();
  first<exec::CollectiveStart>(exec, 1, [](const exec::CollectiveStart& s) { return s.tag == 0; }).tag = 99;
  first<exec::CollectiveWait>(exec, 1, [](const exec::CollectiveWait& w) { return w.tag == 0; }).tag = 99;
  expect_error(exec, {"deadlocks", "(wait #0) waits for the other members to start #0, but device 1 instruction",
                      "(wait #99)"});

  exec::ExecPlan unstarted = Builder(GradientPath::start_wait).build();
  auto& program = unstarted.programs[1];
  program.erase(std::ranges::find_if(program, [](const Instruction& i) { return std::holds_alternative<exec::CollectiveStart>(i); }));
  expect_error(unstarted, {"(wait #0): waits for #0, which device 1 has not started"});
}

// A gather start must place every member's rows: device 1 contributing device 0's rows (a replica, which
// counts once) leaves the second half of the weight's gradient held by no member.
TEST(ExecInterpreter, GatherStartOfOverlappingRowsIsAnError) {
  exec::ExecPlan exec = Builder(GradientPath::gather_start).build();
  const auto& start = first<exec::CollectiveStart>(exec, 1, [](const exec::CollectiveStart&) { return true; });
  exec.buffers[start.inputs[0].index()].piece.box[0] =
      exec.buffer(first<exec::CollectiveStart>(exec, 0, [](const exec::CollectiveStart&) { return true; }).inputs[0]).piece.box[0];
  expect_error(exec, {"all-gather start #1", "element [8, 0] is held by 0 distinct input pieces"});
}

TEST(ExecInterpreter, RecvOfTheWrongPieceIsAnError) {
  exec::ExecPlan exec = Builder(GradientPath::send_recv_combine).build();
  auto& recv = first<exec::Recv>(exec, 1, [](const exec::Recv&) { return true; });
  exec.buffers[recv.buffer.index()].piece.value = ValuePart{1, 2};  // the send is part 0 of 2
  expect_error(exec, {"receives", "which device 0 sent at instruction"});
}

TEST(ExecInterpreter, RecvOfAnotherTagDeadlocks) {
  exec::ExecPlan exec = Builder(GradientPath::send_recv_combine).build();
  first<exec::Recv>(exec, 1, [](const exec::Recv&) { return true; }).tag = 99;
  expect_error(exec, {"deadlocks", "waits for a send from device 0 with tag 99"});
}

TEST(ExecInterpreter, CombineWithAMissingInputIsAnError) {
  exec::ExecPlan exec = Builder(GradientPath::send_recv_combine).build();
  first<exec::Local>(exec, 0, [](const exec::Local& l) { return l.kind == exec::LocalKind::combine; }).inputs.pop_back();
  expect_error(exec, {"is not produced whole", "device 0 instruction"});
}

TEST(ExecInterpreter, ReadAfterFreeAndDoubleWritesAreErrors) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  const BufferId x = first<exec::Compute>(exec, 0, [](const exec::Compute&) { return true; }).inputs[0];
  exec.programs[0].insert(exec.programs[0].begin() + 4, exec::Free{x});  // before fc1.backward reads it
  expect_error(exec, {"is read after it is freed", "b0 %x[0:2, 0:8]"});

  exec::ExecPlan twice = Builder(GradientPath::all_reduce).build();
  twice.programs[0].insert(twice.programs[0].begin() + 1, twice.programs[0].front());
  expect_error(twice, {"is written twice", "device 0 instruction 1 (load b0"});
}

TEST(ExecInterpreter, ComputeReadingTheWrongBoxIsAnError) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  auto& compute = first<exec::Compute>(exec, 1, [](const exec::Compute&) { return true; });
  exec.buffers[compute.inputs[0].index()].piece.box[0] = plan::IndexRange{0, 2, 1};  // device 0's rows of x
  expect_error(exec, {"input 0 is buffer", "the sub-op reads %x[2:4, 0:8]"});
}

TEST(ExecInterpreter, UnreceivedSendAndUncomputedSubOpAreErrors) {
  exec::ExecPlan exec = Builder(GradientPath::all_reduce).build();
  exec.programs[0].push_back(exec::Send{1, 99, first<exec::Load>(exec, 0, [](const exec::Load&) { return true; }).output});
  expect_error(exec, {"which no recv takes", "tag 99"});

  exec::ExecPlan missing = Builder(GradientPath::all_reduce).build();
  std::erase_if(missing.programs[1], [&](const Instruction& i) {
    const auto* c = std::get_if<exec::Compute>(&i);
    return c != nullptr && data_parallel_plan().op_of(c->sub_op).pass == ir::Pass::optimizer;
  });
  expect_error(missing, {"is never computed", "adamw"});
}

}  // namespace
}  // namespace loom::verify
