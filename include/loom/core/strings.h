// Small string utilities shared by the text forms and the command line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

std::string join(const std::vector<std::string>& parts, std::string_view separator);
std::vector<std::string> split(std::string_view text, char separator);
std::string_view trim(std::string_view text);
// "text" in double quotes with '"' and '\\' escaped and control bytes as \xNN: readable back by the
// graph text form and as a YAML (or JSON-like) double-quoted scalar.
std::string quoted(std::string_view text);

// 1234567 -> "1.23M"; 1.5e12 -> "1.50T" (decimal units, for counts and FLOPs).
std::string human_count(double value);
// 1536 -> "1.50 KiB" (binary units, for bytes).
std::string human_bytes(double bytes);

}  // namespace loom
