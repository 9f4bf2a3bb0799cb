// ONNX models (--graph / --from FILE.onnx): frontend::onnx_to_graph, the reader load_onnx_file calls on the
// file's bytes (a serialized ModelProto), with symbolic dims sized as --onnx-dim would.
#include "fuzz_input.h"
#include "loom/frontend/onnx_file.h"
#include "loom/ops/registry.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes = loom::fuzz::text_of(data, size);
  const loom::frontend::OnnxOptions options{.dims = {{"batch", 2}, {"batch_size", 2}, {"sequence", 8}, {"seq", 8}}};
  (void)loom::frontend::onnx_to_graph(bytes, "<fuzz>", loom::ops::builtin_ops(), options);
  return 0;
}
