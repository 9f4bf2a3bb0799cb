// Every registered op type has a reference kernel, with a backward exactly when it is differentiable,
// so the interpreter can run any graph the registry can build.
#include <gtest/gtest.h>

#include "loom/ops/registry.h"
#include "loom/verify/kernels.h"

namespace loom::verify {
namespace {

TEST(KernelCoverage, EveryRegisteredOpHasKernels) {
  std::size_t covered = 0;
  for (const ir::OpDef* def : ops::builtin_ops().all()) {
    const Kernel* kernel = reference_kernels().find(def->type);
    ASSERT_NE(kernel, nullptr) << "no reference kernel for '" << def->type << "' (" << def->family << ")";
    EXPECT_EQ(static_cast<bool>(kernel->backward), def->backward.differentiable)
        << "'" << def->type << "': a backward kernel exactly when the op is differentiable";
    ++covered;
  }
  EXPECT_EQ(covered, ops::builtin_ops().size());
  EXPECT_EQ(reference_kernels().types().size(), ops::builtin_ops().size()) << "a kernel for an unregistered op type";
}

TEST(KernelRegistry, ErrorsNameTheOpType) {
  const Kernel* matmul = reference_kernels().find("matmul");
  ASSERT_NE(matmul, nullptr);
  ir::Attrs attrs;
  KernelContext ctx{attrs, {}, {}, {}, {}};
  std::vector<NdArray> wrong = {NdArray(ir::Shape{2, 3})};
  auto out = matmul->forward(ctx, wrong);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("matmul"), std::string::npos) << out.error().message;
}

}  // namespace
}  // namespace loom::verify
