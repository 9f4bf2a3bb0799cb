#include "loom/core/strings.h"

#include <array>
#include <cmath>

#include <fmt/format.h>

namespace loom {

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string_view trim(std::string_view text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string human_count(double value) {
  static constexpr std::array<const char*, 6> kUnits = {"", "K", "M", "G", "T", "P"};
  std::size_t unit = 0;
  double scaled = value;
  while (std::fabs(scaled) >= 1000.0 && unit + 1 < kUnits.size()) {
    scaled /= 1000.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f}", scaled);
  return fmt::format("{:.2f}{}", scaled, kUnits[unit]);
}

std::string human_bytes(double bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t unit = 0;
  double scaled = bytes;
  while (std::fabs(scaled) >= 1024.0 && unit + 1 < kUnits.size()) {
    scaled /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{:.0f} B", scaled);
  return fmt::format("{:.2f} {}", scaled, kUnits[unit]);
}

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace loom
