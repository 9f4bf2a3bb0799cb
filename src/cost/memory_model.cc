#include "loom/cost/memory_model.h"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

#include "loom/exec/instruction_buffers.h"
#include "loom/plan/residence.h"

namespace loom::cost {
namespace {

using exec::BufferId;

// Bytes of the pieces a device holds of one role, each element counted once per tensor: value parts
// are ignored (replicas and parts of one box count once), and a box inside another box of the same
// tensor is not counted again. Boxes that overlap without one containing the other are both counted
// (no policy produces them for model state).
class PieceUnion {
 public:
  void add(const exec::Buffer& buffer) {
    plan::SubTensor box = buffer.piece;
    box.value = plan::ValuePart{};
    for (const auto& [held, bytes] : pieces_)
      if (plan::contains(held, box)) return;
    std::erase_if(pieces_, [&](const auto& held) { return plan::contains(box, held.first); });
    pieces_.emplace_back(std::move(box), buffer.bytes);
  }
  std::int64_t bytes() const {
    std::int64_t total = 0;
    for (const auto& [held, bytes] : pieces_) total += bytes;
    return total;
  }

 private:
  std::vector<std::pair<plan::SubTensor, std::int64_t>> pieces_;
};

ModelState model_state(const exec::ExecPlan& exec, int device, const std::vector<char>& final_gradient) {
  const ir::Graph& graph = *exec.plan->graph;
  PieceUnion parameters, gradients, states;
  for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(device)]) {
    if (const auto* load = std::get_if<exec::Load>(&instruction)) {
      const exec::Buffer& b = exec.buffer(load->output);
      if (b.memory == exec::Memory::host) continue;  // offloaded: not the GPU's
      const ir::TensorRole role = graph.tensor(b.piece.tensor).role;
      if (role == ir::TensorRole::parameter) parameters.add(b);
      if (role == ir::TensorRole::optimizer_state) states.add(b);
    } else if (const auto* compute = std::get_if<exec::Compute>(&instruction)) {
      const bool step = exec.plan->op_of(compute->sub_op).pass == ir::Pass::optimizer;
      for (BufferId in : compute->inputs)
        if (step && in.valid() && exec.buffer(in).memory == exec::Memory::gpu &&
            graph.tensor(exec.buffer(in).piece.tensor).role == ir::TensorRole::gradient)
          gradients.add(exec.buffer(in));
      // A final gradient reduced only when the steps read it is kept as produced until then.
      for (BufferId out : compute->outputs) {
        const ir::TensorId t = exec.buffer(out).piece.tensor;
        if (final_gradient[t.index()] != 0 && plan::residence_of(*exec.plan, t) == plan::Residence::consumers)
          gradients.add(exec.buffer(out));
      }
    }
  }
  return {.parameter_bytes = parameters.bytes(), .gradient_bytes = gradients.bytes(),
          .optimizer_state_bytes = states.bytes()};
}

}  // namespace

std::int64_t RoleBytes::total() const {
  std::int64_t sum = 0;
  for (std::int64_t b : bytes) sum += b;
  return sum;
}

std::string RoleBytes::to_string() const {
  std::vector<std::size_t> order;
  for (std::size_t r = 0; r < kRoleCount; ++r)
    if (bytes[r] != 0) order.push_back(r);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return bytes[a] > bytes[b]; });
  std::string text;
  for (std::size_t r : order) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", ir::name(static_cast<ir::TensorRole>(r)), format_bytes(static_cast<double>(bytes[r])));
  }
  return text.empty() ? "nothing" : text;
}

int MemoryReport::max_device() const {
  int best = -1;
  for (const DeviceMemory& d : devices)
    if (best < 0 || d.peak_bytes > devices[static_cast<std::size_t>(best)].peak_bytes) best = d.device;
  return best;
}

namespace {

// One device's memory over its program: each buffer live from its write (a start's outputs from the
// start) to its free.
DeviceMemory device_memory(const exec::ExecPlan& exec, int device, std::vector<char>& live,
                           const std::vector<char>& final_gradient) {
  const ir::Graph& graph = *exec.plan->graph;
  DeviceMemory memory{.device = device};
  RoleBytes current;
  std::int64_t host = 0;  // host buffers (offloaded states), counted apart from the GPU's memory
  const auto& program = exec.programs[static_cast<std::size_t>(device)];
  for (std::size_t step = 0; step < program.size(); ++step) {
    auto change = [&](BufferId id, bool alive) {
      if (!id.valid() || live[id.index()] == static_cast<char>(alive)) return;
      live[id.index()] = static_cast<char>(alive);
      const exec::Buffer& b = exec.buffer(id);
      if (b.memory == exec::Memory::host) {
        host += alive ? b.bytes : -b.bytes;
        memory.host_peak_bytes = std::max(memory.host_peak_bytes, host);
        return;
      }
      current[graph.tensor(b.piece.tensor).role] += alive ? b.bytes : -b.bytes;
    };
    exec::for_each_written(program[step], [&](BufferId id) { change(id, true); });
    if (const auto* free = std::get_if<exec::Free>(&program[step])) change(free->buffer, false);
    if (const std::int64_t total = current.total(); total > memory.peak_bytes) {
      memory.peak_bytes = total;
      memory.peak_instruction = step;
      memory.at_peak = current;
    }
  }
  memory.final_bytes = current.total();
  memory.model_state = model_state(exec, device, final_gradient);
  return memory;
}

}  // namespace

MemoryReport memory_usage(const exec::ExecPlan& exec) {
  assert(exec.plan != nullptr && exec.plan->graph != nullptr);
  MemoryReport report;
  std::vector<char> live(exec.buffers.size(), 0);
  const std::vector<char> final_gradient = ir::optimizer_gradients(*exec.plan->graph);
  for (int device = 0; device < exec.num_devices; ++device)
    report.devices.push_back(device_memory(exec, device, live, final_gradient));
  return report;
}

MemoryReport memory_usage(const exec::FoldedStep& folded) {
  const exec::ExecPlan& exec = folded.step;
  assert(exec.plan != nullptr && exec.plan->graph != nullptr);
  assert(exec.class_of.size() == static_cast<std::size_t>(exec.num_devices));
  MemoryReport report;
  std::vector<char> live(exec.buffers.size(), 0);
  const std::vector<char> final_gradient = ir::optimizer_gradients(*exec.plan->graph);
  for (int device = 0; device < exec.num_devices; ++device) {
    // An image of its class (exec/fold.h) holds what its representative, always a lower device, holds.
    const int rep = exec.representatives[static_cast<std::size_t>(exec.class_of[static_cast<std::size_t>(device)])];
    if (rep != device) {
      DeviceMemory copy = report.devices[static_cast<std::size_t>(rep)];
      copy.device = device;
      report.devices.push_back(std::move(copy));
      continue;
    }
    report.devices.push_back(device_memory(exec, device, live, final_gradient));
  }
  return report;
}

Expected<void> check_fits(const MemoryReport& report, const cluster::GpuSpec& gpu) {
  constexpr int kListed = 4;
  std::string over;
  int count = 0;
  for (const DeviceMemory& d : report.devices) {
    if (d.peak_bytes <= gpu.memory_bytes) continue;
    if (++count <= kListed)
      over += fmt::format("; device {} peaks at {} (instruction {}): {}; model state {}", d.device,
                          format_bytes(static_cast<double>(d.peak_bytes)), d.peak_instruction, d.at_peak.to_string(),
                          format_bytes(static_cast<double>(d.model_state.total())));
  }
  if (count == 0) return {};
  if (count > kListed) over += fmt::format("; and {} more", count - kListed);
  return fail(fmt::format("out of memory: {} of {} devices need more than the {}'s {}{}", count, report.devices.size(),
                          gpu.name, format_bytes(static_cast<double>(gpu.memory_bytes)), over),
              "shard the model state (ZeRO, tensor or pipeline parallelism), recompute activations, or use "
              "smaller micro-batches");
}

std::string format_bytes(double bytes) {
  static constexpr std::array<std::string_view, 5> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", static_cast<std::int64_t>(bytes));
  std::size_t unit = 0;
  bytes /= 1024;
  while (bytes >= 1024 && unit + 1 < kUnits.size()) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:.2f} {}", bytes, kUnits[unit]);
}

}  // namespace loom::cost
