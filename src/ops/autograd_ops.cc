#include "loom/ops/families.h"

namespace loom::ops {

void register_autograd_ops(OpRegistry& r) { (void)r; }

}  // namespace loom::ops
