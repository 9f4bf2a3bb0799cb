// The accelerator of a cluster: peak arithmetic per precision, memory size and bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loom/core/error.h"

namespace loom::cluster {

// Precision of the tensor-core (or vector) path; kept apart from ir::DType because cluster sits
// left of nothing but core (DESIGN.md, libraries).
enum class Precision : std::uint8_t { bf16, fp16, fp32 };

std::string_view name(Precision precision);
Expected<Precision> parse_precision(std::string_view text);  // bf16, fp16/f16, fp32/f32

struct GpuSpec {
  std::string name;
  double peak_bf16 = 0;  // FLOP/s, dense tensor cores; 0 where the GPU has no bf16 path (V100)
  double peak_fp16 = 0;  // FLOP/s, dense tensor cores
  double peak_fp32 = 0;  // FLOP/s, without tensor cores
  std::int64_t memory_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s
  bool operator==(const GpuSpec&) const = default;
};

double peak_flops(const GpuSpec& gpu, Precision precision);

}  // namespace loom::cluster
