#include "loom/cluster/gpu.h"

namespace loom::cluster {

std::string_view name(Precision precision) {
  switch (precision) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp32: return "fp32";
  }
  return "?";
}

Expected<Precision> parse_precision(std::string_view text) {
  if (text == "bf16") return Precision::bf16;
  if (text == "fp16" || text == "f16") return Precision::fp16;
  if (text == "fp32" || text == "f32") return Precision::fp32;
  return fail(fmt::format("unknown precision '{}'", text), "use bf16, fp16 or fp32");
}

double peak_flops(const GpuSpec& gpu, Precision precision) {
  switch (precision) {
    case Precision::bf16: return gpu.peak_bf16;
    case Precision::fp16: return gpu.peak_fp16;
    case Precision::fp32: return gpu.peak_fp32;
  }
  return 0;
}

}  // namespace loom::cluster
