// Element types of FullTensors.
#pragma once

#include <cstdint>
#include <string_view>

#include "loom/core/error.h"

namespace loom::ir {

enum class DType : std::uint8_t { f64, f32, f16, bf16, i64, i32, i8, u8, boolean };

std::int64_t size_bytes(DType dtype);
std::string_view name(DType dtype);  // "f32", "bf16", "i64", "bool", ...
bool is_floating(DType dtype);
// Accepts the names above plus the common aliases fp32, fp16, float32, float16, bfloat16, int64, ...
Expected<DType> parse_dtype(std::string_view text);

}  // namespace loom::ir
