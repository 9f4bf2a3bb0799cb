// Resolving built-in ops in tests: one call gives the resolved instance plus its forward FLOPs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "loom/ir/op_def.h"
#include "loom/ops/registry.h"

namespace loom::ops::testing {

struct Resolved {
  ir::ResolvedOp op;
  double flops = 0;
};

// Resolves `type` on the given shapes; dtypes default to f32 for every input.
inline Expected<Resolved> resolve(std::string_view type, const std::vector<ir::Shape>& shapes,
                                  const ir::Attrs& attrs = {}, std::vector<ir::DType> dtypes = {}) {
  const ir::OpDef* def = builtin_ops().find(type);
  if (def == nullptr) return fail(fmt::format("no op '{}'", type));
  if (dtypes.empty()) dtypes.assign(shapes.size(), ir::DType::f32);
  LOOM_ASSIGN_OR_RETURN(ir::ResolvedOp op, ir::resolve_op(*def, attrs, shapes, dtypes));
  const double flops = ir::forward_flops(*def, attrs, shapes, dtypes, op);
  return Resolved{std::move(op), flops};
}

// A resolution kept whole even when it fails (`op` holds the error; flops stay 0), with bf16 inputs
// by default, for tests that inspect failures and successes alike.
struct Attempt {
  Expected<ir::ResolvedOp> op;
  double flops = 0;
};

inline Attempt attempt(std::string_view type, std::vector<ir::Shape> shapes, ir::Attrs attrs = {},
                       ir::DType dtype = ir::DType::bf16) {
  const ir::OpDef* def = builtin_ops().find(type);
  if (def == nullptr) return Attempt{fail(fmt::format("no op '{}'", type))};
  std::vector<ir::DType> dtypes(shapes.size(), dtype);
  Attempt a{ir::resolve_op(*def, attrs, shapes, dtypes)};
  if (a.op) a.flops = ir::forward_flops(*def, attrs, shapes, dtypes, *a.op);
  return a;
}

// The error of a failed resolution, or a marker that makes any fragment check fail.
template <class T>
std::string error_text(const Expected<T>& result) {
  return result ? std::string("<no error>") : result.error().to_string();
}

}  // namespace loom::ops::testing

#define EXPECT_ERROR_HAS(result, fragment)                                                       \
  EXPECT_NE(::loom::ops::testing::error_text(result).find(fragment), std::string::npos)          \
      << "expected an error containing \"" << (fragment) << "\", got: " << ::loom::ops::testing::error_text(result)
