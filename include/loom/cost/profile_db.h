// Profile database (DESIGN.md, "Cost model and simulator"): measured times of operator instances, keyed
// by op, local input shapes, dtype and device, kept in a JSON file. A measured time overrides the
// roofline of the compute model (compute_model.h).
//
// File format (version 1):
//   {"version": 1, "entries": [
//     {"op": "matmul", "shapes": [[1024, 1024], [1024, 1024]], "dtype": "bf16", "device": "A100-SXM4-80GB",
//      "seconds": 1.1e-5}, ...]}
// "op" is the registry type, with "/backward" appended for a backward (mirror) op; "shapes" the input
// shapes the instance reads; "dtype" any name ir::parse_dtype accepts (stored canonically); "device" the
// GpuSpec name; "seconds" a positive finite number. A key may appear once.
#pragma once

#include <compare>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/ir/dtype.h"
#include "loom/ir/shape.h"

namespace loom::cost {

struct ProfileKey {
  std::string op;                  // "matmul", "matmul/backward"
  std::vector<ir::Shape> shapes;   // input shapes of the instance
  ir::DType dtype = ir::DType::bf16;
  std::string device;              // cluster::GpuSpec::name

  std::string to_string() const;  // "matmul [8, 16] [16, 4] bf16 on A100"
  auto operator<=>(const ProfileKey& other) const {
    if (auto c = op <=> other.op; c != 0) return c;
    if (auto c = dtype <=> other.dtype; c != 0) return c;
    if (auto c = device <=> other.device; c != 0) return c;
    return std::lexicographical_compare_three_way(shapes.begin(), shapes.end(), other.shapes.begin(),
                                                  other.shapes.end(), [](const ir::Shape& a, const ir::Shape& b) {
                                                    return a.dims <=> b.dims;
                                                  });
  }
  bool operator==(const ProfileKey& other) const { return (*this <=> other) == 0; }
};

class ProfileDb {
 public:
  // Reads a profile file. Errors name the file and, for a bad entry, its index and field.
  static Expected<ProfileDb> load(const std::string& path);
  // Parses the file's text; `source` names it in errors.
  static Expected<ProfileDb> parse(const std::string& text, const std::string& source);

  // Writes atomically (a temporary file beside the target, renamed into place); entries in key order,
  // so the same database gives byte-identical files.
  Expected<void> save(const std::string& path) const;
  std::string to_json() const;

  // Records (or replaces) a measurement; seconds must be positive and finite (asserted).
  void set(ProfileKey key, double seconds);
  std::optional<double> find(const ProfileKey& key) const;
  std::size_t size() const { return entries_.size(); }
  const std::map<ProfileKey, double>& entries() const { return entries_; }

 private:
  std::map<ProfileKey, double> entries_;
};

}  // namespace loom::cost
