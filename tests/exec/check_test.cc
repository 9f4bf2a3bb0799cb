#include "loom/exec/check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "exec_test_plans.h"

namespace loom::exec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::data_parallel;
using testing::Fixture;
using testing::gathered;
using testing::kFc;
using testing::pipeline;

// The check's message (and that it failed at all), for matchers.
std::string failure(const ExecPlan& exec) {
  const Expected<void> result = check_exec_plan(exec);
  if (result) return "(passed)";
  EXPECT_FALSE(result.error().hint.empty()) << result.error().message;
  return result.error().message;
}

std::vector<Instruction>& program(Fixture& f, int device) { return f.exec.programs[static_cast<std::size_t>(device)]; }

template <class T>
T& instruction(Fixture& f, int device, std::size_t index) {
  return std::get<T>(program(f, device)[index]);
}

TEST(CheckExecPlan, ValidPlansPass) {
  for (int n : {1, 2, 4}) {
    auto f = data_parallel(n);
    EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
  }
  for (int r : {1, 2}) {
    auto f = pipeline(r);
    EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
  }
}

// Device 0 loads x whole, slices it into halves, scales one half into a value part, and combines.
std::unique_ptr<Fixture> locals() {
  auto f = data_parallel(1);
  const plan::SubTensor whole = f->part(kFc, 0).inputs[0];
  const BufferId x = f->load(0, whole);
  plan::SubTensor top = whole, bottom = whole;
  top.box[0] = {0, 6, 1};
  bottom.box[0] = {6, 12, 1};
  const BufferId t = f->buffer(0, top), b = f->buffer(0, bottom);
  f->emit(0, Local{LocalKind::slice, {x}, t});
  f->emit(0, Local{LocalKind::slice, {x}, b});
  plan::SubTensor half = top;
  half.value = {0, 2};
  const BufferId s = f->buffer(0, half);
  f->emit(0, Local{LocalKind::scale, {t}, s});
  f->emit(0, Local{LocalKind::combine, {t, b}, f->buffer(0, whole)});
  return f;
}

// One broken plan: a valid fixture, one change, and what the message must say.
struct Broken {
  std::string name;
  std::function<std::unique_ptr<Fixture>()> make;
  std::function<void(Fixture&)> change;
  std::vector<std::string> says;
};
void PrintTo(const Broken& broken, std::ostream* os) { *os << broken.name; }  // not gtest's byte dump

std::unique_ptr<Fixture> dp2() { return data_parallel(2); }
std::unique_ptr<Fixture> dp2_async() { return data_parallel(2, /*async=*/true); }
std::unique_ptr<Fixture> pp1() { return pipeline(1); }
std::unique_ptr<Fixture> gathered2_async() { return gathered(2, /*async=*/true); }

// In data_parallel(n), every device runs fc at 2, loss at 4 and the all-reduce at 6.
constexpr std::size_t kFcAt = 2, kLossAt = 4, kAllReduceAt = 6;
// In data_parallel(n, async), every device starts the loss's all-reduce at 5 and waits for it at 7.
constexpr std::size_t kStartAt = 5, kWaitAt = 7;
// In gathered(n, async), every device starts the all-gather of w's shards at 2 and waits for it at 4.
constexpr std::size_t kGatherStartAt = 2;
// In locals(), device 0 runs the slices at 9 and 10, the scale at 11 and the combine at 12.
constexpr std::size_t kSliceAt = 9, kScaleAt = 11, kCombineAt = 12;

void set_box(Fixture& f, BufferId id, std::size_t dim, plan::IndexRange range) {
  f.exec.buffers[id.index()].piece.box[dim] = range;
}

std::vector<Broken> broken_plans() {
  return {
      {"ProgramsMustMatchDevices", dp2, [](Fixture& f) { f.exec.num_devices = 3; }, {"3 devices but 2 programs"}},
      {"NoPlan", dp2, [](Fixture& f) { f.exec.plan = nullptr; }, {"no plan"}},
      {"BufferWrittenTwice", dp2,
       [](Fixture& f) { program(f, 0).insert(program(f, 0).begin() + 1, Load{BufferId(0)}); },
       {"device 0, instruction 1", "b0 %x[0:6, 0:8] is written twice (first by instruction 0)"}},
      {"ReadBeforeWrite", dp2, [](Fixture& f) { std::swap(program(f, 1)[0], program(f, 1)[kFcAt]); },  // fc before x's load
       {"device 1, instruction 0 (compute fc[1/2]", "before it is written"}},
      {"ReadAfterFree", dp2, [](Fixture& f) { std::swap(program(f, 0)[kFcAt], program(f, 0)[kFcAt + 1]); },
       {"reads b0 %x[0:6, 0:8] after it is freed (by instruction 2)"}},
      {"FreedTwice", dp2, [](Fixture& f) { program(f, 0).push_back(Free{BufferId(0)}); },
       {"is freed twice (first by instruction 3)"}},
      {"BufferOfAnotherDevice", dp2, [](Fixture& f) { instruction<Compute>(f, 1, kFcAt).inputs[1] = BufferId(1); },
       {"uses b1 %w[0:8, 0:8], which lives on device 0"}},
      {"BufferNeverWritten", dp2, [](Fixture& f) { f.buffer(1, f.part(kFc, 0).inputs[0]); },
       {"on device 1 is never written"}},
      {"LoadOfAComputedTensor", dp2, [](Fixture& f) { f.load(0, f.part(kFc, 0).outputs[0]); },
       {"loads a piece of 'fc', which op 'fc' computes"}},
      {"RecvWithoutSend", [] { return pipeline(2); },
       [](Fixture& f) { program(f, 1).erase(program(f, 1).begin() + 3); },  // device 1's send to device 3
       {"device 3, instruction 0 (recv <- 1 #1", "no matching send on device 1"}},
      {"SendWithoutRecv", pp1, [](Fixture& f) { f.emit(0, Send{1, 7, BufferId(1)}); },
       {"(send -> 1 #7 b1 %w[0:8, 0:8]) has no matching recv on device 1"}},
      {"SendAndRecvPiecesDiffer", pp1, [](Fixture& f) { instruction<Send>(f, 0, 3).buffer = BufferId(0); },  // x, not fc
       {"send #0 from device 0 to 1 carries b0 %x[0:12, 0:8]", "pieces differ"}},
      {"SendAndRecvBytesDiffer", pp1,
       [](Fixture& f) { f.exec.buffers[instruction<Recv>(f, 1, 0).buffer.index()].bytes /= 2; },
       {"(384 bytes), but the recv writes", "(192 bytes)"}},
      {"RepeatedTagBetweenAPair", pp1, [](Fixture& f) { f.emit(0, Send{1, 0, BufferId(1)}); },
       {"repeats tag 0 between devices 0 and 1 (first at instruction 3)"}},
      {"CollectiveMemberMissing", dp2, [](Fixture& f) { program(f, 1).erase(program(f, 1).begin() + kAllReduceAt); },
       {"all-reduce #0 of 'loss' (group 0,1): device 1 of its group never runs it"}},
      {"CollectiveKindsDisagree", dp2,
       [](Fixture& f) { instruction<Collective>(f, 1, kAllReduceAt).kind = comm::Primitive::all_gather; },
       {"device 1, instruction 6 (all-gather #0", "kinds disagree: device 0, instruction 6 runs all-reduce #0"}},
      {"CollectiveGroupsDisagree", dp2, [](Fixture& f) { instruction<Collective>(f, 1, kAllReduceAt).group = {1, 0}; },
       {"groups disagree"}},
      {"CollectiveRunByANonMember", [] { return data_parallel(4); },
       [](Fixture& f) { instruction<Collective>(f, 3, kAllReduceAt).group = {0, 1, 2}; }, {"device 3 is not in it"}},
      {"CollectiveOfANonCollectiveKind", dp2,
       [](Fixture& f) {
         for (int d : {0, 1}) instruction<Collective>(f, d, kAllReduceAt).kind = comm::Primitive::p2p;
       },
       {"has kind p2p, which is not a collective"}},
      {"CollectiveGroupListsADeviceTwice", dp2,
       [](Fixture& f) {
         for (int d : {0, 1}) instruction<Collective>(f, d, kAllReduceAt).group = {0, 1, 1};
       },
       {"which lists a device twice"}},
      {"ComputeOnTheWrongDevice", dp2, [](Fixture& f) { instruction<Compute>(f, 1, kFcAt).sub_op = f.part(kFc, 0).id; },
       {"runs sub-op 'fc[0/2]', which is assigned to device 0"}},
      {"ComputeOutputPieceWrong", dp2,
       [](Fixture& f) { set_box(f, instruction<Compute>(f, 0, kFcAt).outputs[0], 0, {2, 4, 1}); },
       {"output 0 of 'fc[0/2]' is b2 %fc[2:4, 0:8], but the sub-op writes %fc[0:6, 0:8]"}},
      {"ComputeInputPieceWrong", dp2,
       [](Fixture& f) { set_box(f, instruction<Compute>(f, 0, kFcAt).inputs[0], 1, {0, 4, 1}); },
       {"input 0 of 'fc[0/2]' is b0 %x[0:6, 0:4], but the sub-op reads %x[0:6, 0:8]"}},
      {"ComputeInputValuePartOfAnotherCount", dp2,
       [](Fixture& f) { f.exec.buffers[instruction<Compute>(f, 0, kFcAt).inputs[0].index()].piece.value = {1, 3}; },
       {"input 0 of 'fc[0/2]' is b0 %x[0:6, 0:8] (1 of 3), but the sub-op reads %x[0:6, 0:8]"}},
      {"NoBufferForADataInput", dp2, [](Fixture& f) { instruction<Compute>(f, 0, kLossAt).inputs[0] = kNoBuffer; },
       {"has no buffer for input 0 of 'loss[0/2]' (%fc[0:6, 0:8]), which it reads"}},
      {"ComputeArity", dp2, [](Fixture& f) { instruction<Compute>(f, 0, kFcAt).inputs.pop_back(); },
       {"gives 'fc[0/2]' 1 inputs and 1 outputs, but it has 2 and 1"}},
      {"StartOutputReadBeforeItsWait", dp2_async,
       [](Fixture& f) {
         const BufferId sum = instruction<CollectiveStart>(f, 0, kStartAt).outputs[0];
         program(f, 0).insert(program(f, 0).begin() + kWaitAt, Local{LocalKind::slice, {sum}, f.buffer(0, f.exec.buffer(sum).piece)});
       },
       {"device 0, instruction 7", "reads b", "which the start at instruction 5 writes, before its wait"}},
      {"StartOutputFreedBeforeItsWait", dp2_async,
       [](Fixture& f) {
         program(f, 1).insert(program(f, 1).begin() + kWaitAt, Free{instruction<CollectiveStart>(f, 1, kStartAt).outputs[0]});
       },
       {"device 1, instruction 7", "frees b", "before its wait"}},
      {"StartNeverWaited", dp2_async, [](Fixture& f) { program(f, 1).erase(program(f, 1).begin() + kWaitAt); },
       {"device 1, instruction 5 (all-reduce start #0 of 'loss' (group 0,1)", "start #0 is never waited for"}},
      {"WaitWithoutItsStart", dp2_async, [](Fixture& f) { program(f, 0).insert(program(f, 0).begin(), CollectiveWait{0}); },
       {"device 0, instruction 0 (wait #0)", "waits for tag 0, which no earlier start of this device has"}},
      {"WaitedTwice", dp2_async, [](Fixture& f) { f.emit(0, CollectiveWait{0}); },
       {"waits for tag 0 a second time"}},
      {"StartBucketsDisagree", dp2_async,
       [](Fixture& f) {
         auto& start = instruction<CollectiveStart>(f, 1, kStartAt);
         start.inputs.push_back(std::get<Load>(program(f, 1)[1]).output);
         start.outputs.push_back(f.buffer(1, f.part(kFc, 1).inputs[1]));
       },
       {"device 1, instruction 5", "buckets disagree: device 0, instruction 5 runs all-reduce start #0"}},
      {"StartAndBlockingMembersOfOneTag", dp2_async,
       [](Fixture& f) {
         const auto start = instruction<CollectiveStart>(f, 1, kStartAt);
         program(f, 1)[kStartAt] = Collective{start.kind, start.group, start.tag, start.inputs[0], start.outputs[0]};
         program(f, 1).erase(program(f, 1).begin() + kWaitAt);
       },
       {"blocking and asynchronous members disagree"}},
      {"StartOfAKindWithoutAnAsynchronousForm", dp2_async,
       [](Fixture& f) {
         for (int d : {0, 1}) instruction<CollectiveStart>(f, d, kStartAt).kind = comm::Primitive::all_to_all;
       },
       {"starts a all-to-all, which has no asynchronous form"}},
      {"GatherStartOfAnotherTensor", gathered2_async,
       [](Fixture& f) { instruction<CollectiveStart>(f, 1, kGatherStartAt).inputs = {std::get<Load>(program(f, 1)[0]).output}; },
       {"device 1, instruction 2 (all-gather start #0 of 'w'", "buckets disagree: device 0, instruction 2"}},
      {"AllReduceStartOfShards", gathered2_async,  // an all-reduce's members hold one box; shards are not
       [](Fixture& f) {
         for (int d : {0, 1}) instruction<CollectiveStart>(f, d, kGatherStartAt).kind = comm::Primitive::all_reduce;
       },
       {"buckets disagree"}},
      {"GatherStartOutputReadBeforeItsWait", gathered2_async,
       [](Fixture& f) { std::swap(program(f, 0)[kGatherStartAt + 2], program(f, 0)[kGatherStartAt + 3]); },  // fc before the wait
       {"device 0, instruction 4 (compute fc[0/2]", "which the start at instruction 2 writes, before its wait"}},
      {"SliceOfItself", locals,
       [](Fixture& f) { instruction<Local>(f, 0, kSliceAt).inputs = {instruction<Local>(f, 0, kSliceAt).output}; },
       {"before it is written"}},
      {"SliceOutsideItsInput", locals,
       [](Fixture& f) { set_box(f, instruction<Local>(f, 0, kSliceAt).output, 0, {8, 14, 1}); },
       {"slices a box outside its input"}},
      {"ScaleOfTwoInputs", locals, [](Fixture& f) { instruction<Local>(f, 0, kScaleAt).inputs.push_back(BufferId(1)); },
       {"has 2 inputs, but a scale has one"}},
      {"ScaleIntoAnotherBox", locals,
       [](Fixture& f) { set_box(f, instruction<Local>(f, 0, kScaleAt).output, 0, {0, 1, 1}); },
       {"scales into a different box"}},
      {"CombineOfAnotherTensor", locals,
       [](Fixture& f) { instruction<Local>(f, 0, kCombineAt).inputs.push_back(BufferId(1)); },  // w
       {"combines b1 %w[0:8, 0:8] into a piece of another tensor"}},
      {"AccumulateOfRowsOfItsBox", locals,  // the combine's two halves are no running sum's terms
       [](Fixture& f) { instruction<Local>(f, 0, kCombineAt).kind = LocalKind::accumulate; },
       {"device 0, instruction 12", "accumulates b", "whose box is not the running sum's"}},
      {"AccumulateOfOneTerm", locals,
       [](Fixture& f) {
         Local& l = instruction<Local>(f, 0, kCombineAt);
         l.kind = LocalKind::accumulate;
         l.inputs = {std::get<Load>(program(f, 0)[kSliceAt - 1]).output};
       },
       {"accumulates a single buffer"}},
  };
}

class CheckRejects : public ::testing::TestWithParam<Broken> {};

TEST_P(CheckRejects, NamingTheProblem) {
  auto f = GetParam().make();
  ASSERT_TRUE(check_exec_plan(f->exec)) << "the fixture itself: " << failure(f->exec);
  GetParam().change(*f);
  const std::string message = failure(f->exec);
  for (const std::string& part : GetParam().says) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(Structure, CheckRejects, ::testing::ValuesIn(broken_plans()),
                         [](const ::testing::TestParamInfo<Broken>& info) { return info.param.name; });

TEST(CheckExecPlan, ComputeInputMayHoldAnotherPartOfTheSameCount) {
  // Value-part indices are names (exec_plan.h): part 1 of 2 may stand where the sub-op lists part 0.
  auto f = data_parallel(2);
  f->plan.sub_op(f->part(kFc, 0).id).inputs[0].value = {0, 2};
  f->exec.buffers[instruction<Compute>(*f, 0, kFcAt).inputs[0].index()].piece.value = {1, 2};
  EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
}

// Two devices each load x and run all-reduces #1 and #2: in that order on both, or (`opposite`)
// reversed on device 1.
std::unique_ptr<Fixture> two_collectives(bool opposite) {
  auto f = data_parallel(2);
  std::vector<BufferId> x;
  for (int d : {0, 1}) x.push_back(f->load(d, f->part(kFc, d).inputs[0]));
  f->exec.collectives.push_back({ir::TensorId(0), "V->R all-reduce"});
  for (std::int64_t tag : {1, 2}) {
    const std::size_t first = program(*f, 1).size();
    for (int d : {0, 1}) {
      const BufferId out = f->buffer(d, f->part(kFc, d).inputs[0]);
      f->emit(d, Collective{comm::Primitive::all_reduce, {0, 1}, tag, x[static_cast<std::size_t>(d)], out});
    }
    if (opposite && tag == 2) std::swap(program(*f, 1)[first], program(*f, 1)[first - 1]);
  }
  return f;
}

TEST(CheckExecPlan, StartsAndWaitsPass) {
  for (int n : {1, 2, 4}) {
    auto f = data_parallel(n, /*async=*/true);
    EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
  }
}

// All-gathers of shards, blocking or started and waited for: every member's output holds the whole
// weight, each input its own rows of it.
TEST(CheckExecPlan, GatherStartsOfShardsPass) {
  for (int n : {1, 2, 4})
    for (bool async : {false, true}) {
      auto f = gathered(n, async);
      EXPECT_TRUE(check_exec_plan(f->exec)) << n << (async ? " async: " : ": ") << failure(f->exec);
    }
}

// data_parallel(2, async) with device 0 sending w to device 1, which receives it before its start:
// after its start (`after_wait` false) or only after its wait.
std::unique_ptr<Fixture> send_around_a_start(bool after_wait) {
  auto f = data_parallel(2, /*async=*/true);
  const BufferId w = std::get<Load>(program(*f, 0)[1]).output;
  program(*f, 0).insert(program(*f, 0).begin() + (after_wait ? kWaitAt + 1 : kStartAt + 1), Send{1, 9, w});
  program(*f, 1).insert(program(*f, 1).begin() + kStartAt, Recv{0, 9, f->buffer(1, f->exec.buffer(w).piece)});
  return f;
}

// A start goes on at once: device 1 can receive what device 0 sends after its start.
TEST(CheckExecPlan, StartsDoNotBlock) {
  auto f = send_around_a_start(false);
  EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
}

// A wait waits for every member's start: device 0 waits for device 1's, which waits for device 0's send.
TEST(CheckExecPlan, WaitForAStartThatNeverComesDeadlocks) {
  auto f = send_around_a_start(true);
  EXPECT_EQ(failure(f->exec),
            "deadlock: device 0 waits at instruction 7 for device 1 to start #0, which waits at instruction 5 for a "
            "send from device 0 (tag 9)");
}

TEST(CheckExecPlan, CollectivesInTheSameOrderPass) {
  auto f = two_collectives(false);
  EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
}

TEST(CheckExecPlan, CollectivesInOppositeOrderDeadlock) {
  auto f = two_collectives(true);
  const Expected<void> result = check_exec_plan(f->exec);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message,
            "deadlock: device 0 waits at instruction 9 in all-reduce #1 of 'x' (group 0,1) for device 1, which waits at "
            "instruction 9 in all-reduce #2 (group 0,1) for device 0");
  EXPECT_THAT(result.error().hint, HasSubstr("one relative order"));
}

// Two devices each load rows of x and start all-reduces #1 and #2 of them, then wait for both: started in one order on
// both, or (`opposite`) reversed on device 1.
std::unique_ptr<Fixture> two_starts(bool opposite) {
  auto f = data_parallel(2);
  f->exec.collectives.push_back({ir::TensorId(0), "V->R all-reduce"});
  f->exec.collectives.push_back({ir::TensorId(0), "V->R all-reduce"});
  const plan::SubTensor& rows = f->part(kFc, 0).inputs[0];  // the same box on both members
  for (int d : {0, 1}) {
    const BufferId x = f->load(d, rows);
    std::vector<Instruction> starts;
    for (std::int64_t tag : {1, 2})
      starts.push_back(CollectiveStart{comm::Primitive::all_reduce, {0, 1}, tag, {x}, {f->buffer(d, rows)}});
    if (opposite && d == 1) std::swap(starts[0], starts[1]);
    for (Instruction& start : starts) f->emit(d, std::move(start));
    for (std::int64_t tag : {1, 2}) f->emit(d, CollectiveWait{tag});
  }
  return f;
}

TEST(CheckExecPlan, StartsInTheSameOrderPass) {
  auto f = two_starts(false);
  EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
}

// The progress pass takes each start as joining at once, so only the start order sees this deadlock (the
// one prefetch_gathers avoids: a two-level gather started before a flat one on one device, after it on another).
TEST(CheckExecPlan, StartsInOppositeOrdersDeadlock) {
  auto f = two_starts(true);
  const Expected<void> result = check_exec_plan(f->exec);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().message,
            "deadlock: devices start asynchronous collectives #1, #2 in orders that wait on each other (device 0 "
            "starts #1 before #2; device 1 starts #2 before #1)");
  EXPECT_THAT(result.error().hint, HasSubstr("one relative order"));
}

// A ring of n devices where each first receives from its predecessor and only then sends to its
// successor: nobody sends. Device d sends tag d.
std::unique_ptr<Fixture> recv_ring(int n) {
  auto f = data_parallel(n);
  for (int d = 0; d < n; ++d) {
    const int from = (d + n - 1) % n, to = (d + 1) % n;
    f->emit(d, Recv{from, from, f->buffer(d, f->part(kFc, 0).inputs[1])});
    const BufferId w = std::get<Load>(program(*f, d)[1]).output;
    f->emit(d, Send{to, d, w});
  }
  return f;
}

TEST(CheckExecPlan, RecvCycleDeadlock) {
  auto f = recv_ring(3);
  EXPECT_EQ(failure(f->exec),
            "deadlock: device 0 waits at instruction 8 for a send from device 2 (tag 2), which waits at instruction 8 "
            "for a send from device 1 (tag 1), which waits at instruction 8 for a send from device 0 (tag 0)");
}

TEST(CheckExecPlan, RecvWaitingOnADeadlockNamesBoth) {
  // Devices 1 and 2 receive from each other before sending; device 0 waits for device 1's later send.
  auto f = data_parallel(3);
  const plan::SubTensor w = f->part(kFc, 0).inputs[1];
  for (auto [d, peer] : {std::pair{1, 2}, std::pair{2, 1}}) {
    f->emit(d, Recv{peer, peer, f->buffer(d, w)});
    f->emit(d, Send{peer, d, std::get<Load>(program(*f, d)[1]).output});
  }
  f->emit(1, Send{0, 9, std::get<Load>(program(*f, 1)[1]).output});
  f->emit(0, Recv{1, 9, f->buffer(0, w)});
  EXPECT_THAT(failure(f->exec),
              AllOf(HasSubstr("deadlock: device 1 waits at instruction 8 for a send from device 2 (tag 2), which waits "
                              "at instruction 8 for a send from device 1 (tag 1)"),
                    HasSubstr("; device 0 waits at instruction 8 for a send from device 1 (tag 9) that never comes")));
}

TEST(CheckExecPlan, SendsAreBuffered) {
  // Both devices send first and receive second: fine, because a send never blocks.
  auto f = data_parallel(2);
  const plan::SubTensor w = f->part(kFc, 0).inputs[1];
  for (auto [d, peer] : {std::pair{0, 1}, std::pair{1, 0}}) f->emit(d, Send{peer, d, std::get<Load>(program(*f, d)[1]).output});
  for (auto [d, peer] : {std::pair{0, 1}, std::pair{1, 0}}) f->emit(d, Recv{peer, peer, f->buffer(d, w)});
  EXPECT_TRUE(check_exec_plan(f->exec)) << failure(f->exec);
}

}  // namespace
}  // namespace loom::exec
