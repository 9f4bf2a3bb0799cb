#include "loom/exec/device_classes.h"

#include <cstdint>
#include <map>
#include <unordered_map>

#include "loom/core/both_cores.h"

namespace loom::exec {
namespace {

// Each buffer's local shape as a small id (equal shapes, equal ids), so a signature reads one int per
// operand instead of a heap-held box: with millions of buffers, that is most of the cost.
std::vector<std::int64_t> shape_ids(const ExecPlan& exec) {
  std::map<std::vector<std::int64_t>, std::int64_t> ids;
  std::vector<std::int64_t> result, sizes;
  result.reserve(exec.buffers.size());
  for (const Buffer& buffer : exec.buffers) {
    sizes.clear();
    for (const plan::IndexRange& r : buffer.piece.box) sizes.push_back(r.size());
    auto it = ids.find(sizes);
    if (it == ids.end()) it = ids.emplace(sizes, static_cast<std::int64_t>(ids.size())).first;
    result.push_back(it->second);
  }
  return result;
}

// An instruction's signature as a flat list of integers (device_classes.h says what goes in). Written
// into a reused vector so hashing a program allocates nothing per instruction.
class Signature {
 public:
  Signature(const ExecPlan& exec, const std::vector<std::int64_t>& shape_ids) : exec_(exec), shape_ids_(shape_ids) {}

  const std::vector<std::int64_t>& of(const Instruction& instruction) {
    tokens_.clear();
    tokens_.push_back(static_cast<std::int64_t>(instruction.index()));
    std::visit([this](const auto& i) { add(i); }, instruction);
    return tokens_;
  }

 private:
  void add(const Compute& c) {
    const bool known = exec_.plan != nullptr && c.sub_op.index() < exec_.plan->sub_ops.size();
    tokens_.push_back(known ? static_cast<std::int64_t>(exec_.plan->sub_op(c.sub_op).op.value) : -1);
    shapes(c.inputs);
    shapes(c.outputs);
  }
  void add(const Load& l) {
    tokens_.push_back(l.output.index() < exec_.buffers.size() ? exec_.buffer(l.output).piece.tensor.value : -1);
    shape(l.output);
  }
  void add(const Collective& c) {
    tokens_.push_back(static_cast<std::int64_t>(c.kind));
    tokens_.push_back(static_cast<std::int64_t>(c.group.size()));
    shape(c.input);
    shape(c.output);
  }
  void add(const CollectiveStart& c) {
    tokens_.push_back(static_cast<std::int64_t>(c.kind));
    tokens_.push_back(static_cast<std::int64_t>(c.group.size()));
    shapes(c.inputs);
    shapes(c.outputs);
  }
  void add(const CollectiveWait&) {}
  void add(const Send& s) { transfer(s.buffer); }
  void add(const Recv& r) { transfer(r.buffer); }
  void add(const Local& l) {
    tokens_.push_back(static_cast<std::int64_t>(l.kind));
    shapes(l.inputs);
    shape(l.output);
  }
  void add(const Free& f) { shape(f.buffer); }

  void shape(BufferId id) {
    tokens_.push_back(id.index() < shape_ids_.size() ? shape_ids_[id.index()] : -1);
    if (id.index() < exec_.buffers.size() && exec_.buffer(id).memory == Memory::host) tokens_.push_back(-2);  // host
  }
  void shapes(const std::vector<BufferId>& ids) {
    tokens_.push_back(static_cast<std::int64_t>(ids.size()));
    for (BufferId id : ids) shape(id);
  }
  void transfer(BufferId id) {
    shape(id);
    tokens_.push_back(id.index() < exec_.buffers.size() ? exec_.buffer(id).bytes : -1);
  }

  const ExecPlan& exec_;
  const std::vector<std::int64_t>& shape_ids_;
  std::vector<std::int64_t> tokens_;
};

std::uint64_t mix(std::uint64_t h, std::uint64_t token) {
  // splitmix64's finalizer over the running value: cheap and well spread.
  std::uint64_t z = h ^ (token + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t program_hash(Signature& signature, const std::vector<Instruction>& program) {
  std::uint64_t h = mix(0, program.size());
  for (const Instruction& instruction : program)
    for (std::int64_t token : signature.of(instruction)) h = mix(h, static_cast<std::uint64_t>(token));
  return h;
}

// Equal hashes are confirmed instruction by instruction, so a collision never merges two classes.
bool same_program(Signature& sa, Signature& sb, const std::vector<Instruction>& a, const std::vector<Instruction>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (sa.of(a[i]) != sb.of(b[i])) return false;
  return true;
}

}  // namespace

DeviceClasses device_classes(const ExecPlan& exec) {
  DeviceClasses classes;
  const std::vector<std::int64_t> shapes = shape_ids(exec);
  const std::size_t n = exec.programs.size();
  // Per program (both cores, each with its own signatures): its hash, and whether it equals the first
  // program with that hash, the representative of the first class a program of that hash could join.
  std::vector<std::uint64_t> hash(n);
  for_each_on_both_cores(n, [&](std::size_t d) {
    Signature signature(exec, shapes);
    hash[d] = program_hash(signature, exec.programs[d]);
  });
  std::unordered_map<std::uint64_t, std::size_t> first_with;  // hash -> the first program with it
  std::vector<std::size_t> first(n);
  for (std::size_t d = 0; d < n; ++d) first[d] = first_with.try_emplace(hash[d], d).first->second;
  std::vector<char> same_as_first(n, 0);
  for_each_on_both_cores(n, [&](std::size_t d) {
    Signature signature(exec, shapes), other(exec, shapes);
    same_as_first[d] = first[d] == d || same_program(signature, other, exec.programs[first[d]], exec.programs[d]);
  });
  Signature signature(exec, shapes), other(exec, shapes);
  std::unordered_map<std::uint64_t, std::vector<int>> by_hash;  // program hash -> classes with it
  for (std::size_t d = 0; d < n; ++d) {
    const auto& program = exec.programs[d];
    std::vector<int>& candidates = by_hash[hash[d]];
    int found = -1;
    // The first candidate is the class of the first program with this hash (it founded it).
    if (!candidates.empty() && same_as_first[d]) found = candidates.front();
    for (int c : candidates) {
      if (found >= 0) break;
      if (same_program(signature, other,
                       exec.programs[static_cast<std::size_t>(classes.representatives[static_cast<std::size_t>(c)])], program))
        found = c;
    }
    if (found < 0) {
      found = static_cast<int>(classes.representatives.size());
      classes.representatives.push_back(static_cast<int>(d));
      candidates.push_back(found);
    }
    classes.class_of.push_back(found);
  }
  return classes;
}

void assign_device_classes(ExecPlan& exec) {
  DeviceClasses classes = device_classes(exec);
  exec.class_of = std::move(classes.class_of);
  exec.representatives = std::move(classes.representatives);
}

}  // namespace loom::exec
