// Annotations as a custom op's definition or a graph file's op gives them (ir::parse_annotation).
// Law: a parsed annotation prints to text that parses back to it (annotation.h).
#include "fuzz_input.h"
#include "loom/ir/annotation.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text = loom::fuzz::text_of(data, size);
  const loom::Expected<loom::ir::Annotation> parsed = loom::ir::parse_annotation(text);
  if (!parsed) return 0;
  const loom::Expected<loom::ir::Annotation> again = loom::ir::parse_annotation(loom::ir::to_string(*parsed));
  LOOM_FUZZ_LAW(again && *again == *parsed);
  return 0;
}
