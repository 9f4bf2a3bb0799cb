#include "loom/ir/dtype.h"

#include <array>
#include <utility>

namespace loom::ir {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::int64_t bytes;
  bool floating;
};

constexpr std::array<DTypeInfo, 9> kInfo = {{
    {DType::f64, "f64", 8, true},
    {DType::f32, "f32", 4, true},
    {DType::f16, "f16", 2, true},
    {DType::bf16, "bf16", 2, true},
    {DType::i64, "i64", 8, false},
    {DType::i32, "i32", 4, false},
    {DType::i8, "i8", 1, false},
    {DType::u8, "u8", 1, false},
    {DType::boolean, "bool", 1, false},
}};

constexpr std::array<std::pair<std::string_view, DType>, 10> kAliases = {{
    {"fp64", DType::f64},
    {"float64", DType::f64},
    {"fp32", DType::f32},
    {"float32", DType::f32},
    {"fp16", DType::f16},
    {"float16", DType::f16},
    {"bfloat16", DType::bf16},
    {"int64", DType::i64},
    {"int32", DType::i32},
    {"uint8", DType::u8},
}};

const DTypeInfo& info(DType dtype) { return kInfo[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::int64_t size_bytes(DType dtype) { return info(dtype).bytes; }
std::string_view name(DType dtype) { return info(dtype).name; }
bool is_floating(DType dtype) { return info(dtype).floating; }

Expected<DType> parse_dtype(std::string_view text) {
  for (const DTypeInfo& entry : kInfo)
    if (entry.name == text) return entry.dtype;
  for (const auto& [alias, dtype] : kAliases)
    if (alias == text) return dtype;
  return fail(fmt::format("unknown dtype '{}'", text),
              "use one of f64, f32, f16, bf16, i64, i32, i8, u8, bool (or fp32, fp16, bfloat16, ...)");
}

}  // namespace loom::ir
