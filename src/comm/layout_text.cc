// Text form of layouts: "R(1)V(8)D(1)@0-7", "R(2)V(1)D(2,2)@0,2,4,6,8-11".
#include <charconv>
#include <limits>

#include "loom/comm/layout.h"
#include "loom/core/strings.h"

namespace loom::comm {
namespace {

constexpr std::string_view kSyntax = "write a layout as R(r)V(v)D(d1,..,dn)@devices, e.g. R(1)V(8)D(1)@0-7 or @0,2,4,6";

Expected<std::int64_t> parse_int(std::string_view text, std::string_view what, std::string_view whole) {
  text = trim(text);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    return fail(fmt::format("layout '{}': bad {} '{}'", whole, what, text), std::string(kSyntax));
  return value;
}

// Reads "X(" ... ")" at the front of `rest` and returns the inside.
Expected<std::string_view> take_factor(std::string_view& rest, char letter, std::string_view whole) {
  if (rest.size() < 3 || rest[0] != letter || rest[1] != '(')
    return fail(fmt::format("layout '{}': expected '{}(' at '{}'", whole, letter, rest), std::string(kSyntax));
  const std::size_t close = rest.find(')');
  if (close == std::string_view::npos)
    return fail(fmt::format("layout '{}': missing ')' after '{}('", whole, letter), std::string(kSyntax));
  std::string_view inside = rest.substr(2, close - 2);
  rest.remove_prefix(close + 1);
  return inside;
}

// A device id as written; devices are ints, so a larger id must fail here rather than truncate
// ("@4294967296" would otherwise become device 0).
Expected<std::int64_t> parse_device(std::string_view text, std::string_view whole) {
  LOOM_ASSIGN_OR_RETURN(std::int64_t dev, parse_int(text, "device", whole));
  if (dev < 0) return fail(fmt::format("layout '{}': negative device {}", whole, dev));
  if (dev > std::numeric_limits<int>::max())
    return fail(fmt::format("layout '{}': device {} is out of range (the largest device id is {})", whole, dev,
                            std::numeric_limits<int>::max()));
  return dev;
}

Expected<std::vector<int>> parse_devices(std::string_view text, std::string_view whole) {
  std::vector<int> devices;
  for (const std::string& item : split(text, ',')) {
    const std::size_t dash = item.find('-', 1);
    if (dash == std::string::npos) {
      LOOM_ASSIGN_OR_RETURN(std::int64_t dev, parse_device(item, whole));
      devices.push_back(static_cast<int>(dev));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(std::int64_t first, parse_device(std::string_view(item).substr(0, dash), whole));
    LOOM_ASSIGN_OR_RETURN(std::int64_t last, parse_device(std::string_view(item).substr(dash + 1), whole));
    if (last < first || last - first > 1'000'000)
      return fail(fmt::format("layout '{}': bad device range '{}'", whole, item), "write ranges low-high, e.g. 0-7");
    for (std::int64_t dev = first; dev <= last; ++dev) devices.push_back(static_cast<int>(dev));
  }
  return devices;
}

}  // namespace

Expected<Layout> parse_layout(std::string_view text) {
  const std::string_view whole = trim(text);
  const std::size_t at = whole.find('@');
  if (at == std::string_view::npos)
    return fail(fmt::format("layout '{}': missing '@' and the device list", whole), std::string(kSyntax));
  std::string_view rest = whole.substr(0, at);
  Layout layout;
  LOOM_ASSIGN_OR_RETURN(std::string_view r, take_factor(rest, 'R', whole));
  LOOM_ASSIGN_OR_RETURN(layout.r, parse_int(r, "R factor", whole));
  LOOM_ASSIGN_OR_RETURN(std::string_view v, take_factor(rest, 'V', whole));
  LOOM_ASSIGN_OR_RETURN(layout.v, parse_int(v, "V factor", whole));
  LOOM_ASSIGN_OR_RETURN(std::string_view d, take_factor(rest, 'D', whole));
  if (!trim(d).empty()) {  // "D()" is a scalar's layout
    for (const std::string& item : split(d, ',')) {
      LOOM_ASSIGN_OR_RETURN(std::int64_t k, parse_int(item, "D factor", whole));
      layout.d.push_back(k);
    }
  }
  if (!trim(rest).empty())
    return fail(fmt::format("layout '{}': unexpected '{}' before '@'", whole, rest), std::string(kSyntax));
  LOOM_ASSIGN_OR_RETURN(layout.devices, parse_devices(whole.substr(at + 1), whole));
  LOOM_RETURN_IF_ERROR(validate(layout));
  return layout;
}

std::string devices_to_string(const std::vector<int>& devices) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < devices.size();) {
    std::size_t j = i;
    while (j + 1 < devices.size() && devices[j + 1] == devices[j] + 1) ++j;
    if (j - i >= 2) {  // runs of three or more print as a range, shorter ones as a list
      parts.push_back(fmt::format("{}-{}", devices[i], devices[j]));
      i = j + 1;
    } else {
      parts.push_back(fmt::format("{}", devices[i]));
      ++i;
    }
  }
  return join(parts, ",");
}

std::string to_string(const Layout& layout) {
  std::vector<std::string> d;
  for (std::int64_t k : layout.d) d.push_back(fmt::format("{}", k));
  return fmt::format("R({})V({})D({})@{}", layout.r, layout.v, join(d, ","), devices_to_string(layout.devices));
}

}  // namespace loom::comm
