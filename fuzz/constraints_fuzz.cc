// Constraint files (--constraints FILE): search::parse_plan_constraints, which read_plan_constraints calls
// on the file's bytes.
#include "fuzz_input.h"
#include "loom/search/plan_constraints.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)loom::search::parse_plan_constraints(loom::fuzz::text_of(data, size), "<fuzz>");
  return 0;
}
