// The --onnx-dim option's text ("batch=8,seq=128"): frontend::parse_onnx_dims.
#include "fuzz_input.h"
#include "loom/frontend/onnx_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)loom::frontend::parse_onnx_dims(loom::fuzz::text_of(data, size));
  return 0;
}
