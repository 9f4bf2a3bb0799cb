#include "loom/exec/exec_text.h"

#include <gtest/gtest.h>

#include "exec_test_plans.h"

namespace loom::exec {
namespace {

using testing::data_parallel;
using testing::pipeline;

TEST(ExecText, DataParallelProgram) {
  auto f = data_parallel(2);
  EXPECT_EQ(exec_to_text(f->exec, 1),
            "0: load b5 %x[6:12, 0:8]\n"
            "1: load b6 %w[0:8, 0:8]\n"
            "2: compute fc[1/2]  b5 %x[6:12, 0:8], b6 %w[0:8, 0:8] -> b7 %fc[6:12, 0:8]\n"
            "3: free b5\n"
            "4: compute loss[1/2]  b7 %fc[6:12, 0:8] -> b8 %loss[] (1 of 2)\n"
            "5: compute ones[1/2]  - -> b9 %ones[6:12, 0:8]\n"
            "6: all-reduce #0 of 'loss' (group 0,1)  b8 %loss[] (1 of 2) -> b11 %loss[]\n"
            "7: free b7\n");
}

TEST(ExecText, PipelineProgramsShowTransfers) {
  auto f = pipeline(1);
  EXPECT_EQ(exec_to_text(f->exec, 0),
            "0: load b0 %x[0:12, 0:8]\n"
            "1: load b1 %w[0:8, 0:8]\n"
            "2: compute fc[0/1]  b0 %x[0:12, 0:8], b1 %w[0:8, 0:8] -> b2 %fc[0:12, 0:8]\n"
            "3: send -> 1 #0 b2 %fc[0:12, 0:8]\n"
            "4: free b0\n"
            "5: free b2\n");
  EXPECT_EQ(exec_to_text(f->exec, 1),
            "0: recv <- 0 #0 b3 %fc[0:12, 0:8]\n"
            "1: compute loss[0/1]  b3 %fc[0:12, 0:8] -> b4 %loss[]\n"
            "2: compute ones[0/1]  - -> b5 %ones[0:12, 0:8]\n"
            "3: all-reduce #1 of 'loss' (group 1)  b4 %loss[] -> b6 %loss[]\n");
}

TEST(ExecText, Summary) {
  EXPECT_EQ(exec_summary(data_parallel(4)->exec),
            "4 devices in 1 class\n"
            "class 0 (devices 0-3): 2 loads, 3 computes, 1 all-reduce, 2 frees\n");
  EXPECT_EQ(exec_summary(pipeline(2)->exec),
            "4 devices in 2 classes\n"
            "class 0 (devices 0,1): 2 loads, 1 compute, 1 send (192 B), 2 frees\n"
            "class 1 (devices 2,3): 2 computes, 1 all-reduce, 1 recv\n");
}

TEST(ExecText, OutOfRangeIdsPrintWithAQuestionMark) {
  auto f = data_parallel(1);
  EXPECT_EQ(buffer_to_text(f->exec, BufferId(99)), "b99?");
  EXPECT_EQ(buffer_to_text(f->exec, kNoBuffer), "-");
  EXPECT_EQ(instruction_to_text(f->exec, Compute{plan::SubOpId(999), {BufferId(0)}, {}}), "compute $999?  b0 %x[0:12, 0:8] -> ");
  EXPECT_EQ(exec_to_text(f->exec, 3), "(no device 3: the plan has 1 programs)\n");
}

}  // namespace
}  // namespace loom::exec
