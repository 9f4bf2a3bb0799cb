#include "loom/ops/families.h"

namespace loom::ops {

void register_conv_pool_ops(OpRegistry& r) { (void)r; }

}  // namespace loom::ops
