#include "loom/api/search_facts.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "loom/api/resolve_request.h"
#include "loom/api/stage_costs.h"
#include "loom/core/both_cores.h"
#include "loom/policy/stages.h"

namespace loom::api {
namespace {

enum Segment : std::uint8_t { first, layer, last };

// By OpId: the segment of each op's forward owner (a backward op's mirror); optimizer ops are `last`
// (they are priced by state, not by segment).
std::vector<Segment> segments(const ir::Graph& graph) {
  std::vector<Segment> out(graph.ops.size(), last);
  bool seen_layer = false;
  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const ir::Op& op = graph.ops[i];
    if (op.pass != ir::Pass::forward) continue;
    const bool in_layer = !policy::layer_of(op.name).empty();
    seen_layer = seen_layer || in_layer;
    out[i] = in_layer ? layer : seen_layer ? last : first;
  }
  for (std::size_t i = 0; i < graph.ops.size(); ++i)
    if (const ir::Op& op = graph.ops[i]; op.pass == ir::Pass::backward && op.is_mirror())
      out[i] = out[op.mirror_of.index()];
  return out;
}

// The options of the slice that measures `key` (search_facts.h).
JobOptions slice_options(const Job& loaded, const search::ClassKey& key, bool sequence_parallel) {
  JobOptions o = loaded.options;
  o.policy = "megatron";
  o.dp = 1;
  o.tp = key.tp;
  o.pp = 1;
  o.gpus = key.tp;
  o.interleave = 1;
  o.schedule = plan::ScheduleKind::one_f_one_b;
  o.sequence_parallel = sequence_parallel;
  o.zero = 0;
  o.recompute = key.recompute;
  o.coshard = {};
  o.overlap = key.overlap;
  o.fold = Fold::off;
  o.micro_batch_size = 0;
  if (plans_a_graph(loaded.options)) {  // a graph keeps its batch: micro-batches of the class's size
    o.micro_batches = static_cast<int>(std::max<std::int64_t>(
        1, static_cast<std::int64_t>(loaded.workload.samples_per_step) / key.micro_batch_size));
  } else {
    o.layers = 1;
    o.global_batch = key.micro_batch_size;
    o.micro_batches = 1;
  }
  return o;
}

struct Slice {
  search::ClassFacts facts;
  search::StageState state;
};

Expected<Slice> measure_slice(const Job& loaded, const search::ClassKey& key, bool sequence_parallel) {
  JobOptions options = slice_options(loaded, key, sequence_parallel);
  Expected<std::unique_ptr<Job>> planned = plan_job(options);
  if (!planned && options.layers == 1) {  // a model that needs more layers (Swin's stages): the whole depth
    options.layers = loaded.options.layers;
    planned = plan_job(options);
  }
  if (!planned) return std::unexpected(planned.error());
  const std::unique_ptr<Job> job = std::move(*planned);
  const Job& j = *job;
  const ir::Graph& graph = j.graph;
  const std::vector<Segment> segment = segments(graph);
  const int layers = std::max(1, count_layers(graph));
  const int micro_batches = std::max(1, j.request.config.micro_batches);
  const auto& program = j.exec.programs[0];

  // The compute stream of device 0, cut at each compute's start.
  std::vector<const sim::Event*> events;
  for (const sim::Event& e : j.sim.events)
    if (e.device == 0 && e.stream == sim::Stream::compute) events.push_back(&e);
  std::ranges::stable_sort(events, {}, [](const sim::Event* e) { return e->start; });
  const auto op_of = [&](const sim::Event& e) -> const ir::Op* {
    const auto* c = std::get_if<exec::Compute>(&program[static_cast<std::size_t>(e.instruction)]);
    return c ? &graph.op(j.plan.sub_op(c->sub_op).op) : nullptr;
  };
  double backward_start = j.sim.step_time;
  for (const sim::Event* e : events)
    if (const ir::Op* op = op_of(*e); op && op->pass == ir::Pass::backward) {
      backward_start = e->start;
      break;
    }
  double forward[3] = {0, 0, 0}, backward[3] = {0, 0, 0}, optimizer = 0;
  double* bucket = &forward[first];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const sim::Event& e = *events[i];
    if (const ir::Op* op = op_of(e)) {
      const auto id = static_cast<std::size_t>(op - graph.ops.data());
      // A forward op after the first backward compute is a recomputation: backward time.
      bucket = op->pass == ir::Pass::optimizer ? &optimizer
               : e.start < backward_start      ? &forward[segment[id]]
                                               : &backward[segment[id]];
    }
    const double end = i + 1 < events.size() ? events[i + 1]->start : j.sim.step_time;
    *bucket += std::max(0.0, end - e.start);
  }

  const policy::OpBytes bytes = op_bytes(j.exec, j.cluster.gpu.memory_bytes);
  std::int64_t held[3] = {0, 0, 0};
  for (std::size_t i = 0; i < graph.ops.size(); ++i) held[segment[i]] += bytes.held[i];
  // The parameters device 0 loads, by the segment of their first forward reader; the model state split
  // by their local elements (every parameter carries the same gradient and optimizer state per element).
  Slice out;
  search::SegmentState* by_segment[3] = {&out.state.first, &out.state.layer, &out.state.last};
  const std::vector<std::vector<ir::OpId>> readers = ir::consumers(graph);
  double numel[3] = {0, 0, 0};
  for (const exec::Instruction& instruction : program) {
    const auto* load = std::get_if<exec::Load>(&instruction);
    if (load == nullptr) continue;
    const plan::SubTensor& piece = j.exec.buffer(load->output).piece;
    if (graph.tensor(piece.tensor).role != ir::TensorRole::parameter) continue;
    const auto reader = std::ranges::find_if(readers[piece.tensor.index()],
                                             [&](ir::OpId op) { return graph.op(op).pass == ir::Pass::forward; });
    if (reader == readers[piece.tensor.index()].end()) continue;
    const Segment seg = segment[reader->index()];
    by_segment[seg]->shapes.push_back(piece.local_shape().dims);
    numel[seg] += static_cast<double>(piece.numel());
  }
  const cost::DeviceMemory& memory = j.memory.devices[0];
  const cost::ModelState& model = memory.model_state;
  const double total = std::max(1.0, numel[0] + numel[1] + numel[2]);
  for (int seg : {first, layer, last}) {
    const double share = numel[seg] / total / (seg == layer ? layers : 1);
    const auto part = [&](std::int64_t of) { return static_cast<std::int64_t>(static_cast<double>(of) * share); };
    by_segment[seg]->bytes = {part(model.parameter_bytes), part(model.gradient_bytes), part(model.optimizer_state_bytes)};
    by_segment[seg]->tensors = static_cast<double>(by_segment[seg]->shapes.size()) / (seg == layer ? layers : 1);
  }
  search::ClassFacts& f = out.facts;
  const double per_mb = 1.0 / micro_batches;
  f.layer = {forward[layer] * per_mb / layers, backward[layer] * per_mb / layers};
  f.first = {forward[first] * per_mb, backward[first] * per_mb};
  f.last = {forward[last] * per_mb, backward[last] * per_mb};
  const double layer_share = numel[layer] / total;
  f.optimizer_layer = optimizer * layer_share / layers;
  f.optimizer_rest = optimizer * (1 - layer_share);
  f.held_layer = held[layer] / layers;
  f.held_first = held[first];
  f.held_last = held[last];
  f.workspace = std::max<std::int64_t>(0, memory.peak_bytes - model.total() - held[0] - held[1] - held[2]);
  // The first layer's input: the activation its first forward op reads, split over tp with sp.
  for (const ir::Op& op : graph.ops) {
    if (op.pass != ir::Pass::forward || policy::layer_of(op.name).empty()) continue;
    for (ir::TensorId t : op.inputs)
      if (t.valid() && graph.tensor(t).role == ir::TensorRole::activation) {
        f.boundary_bytes = graph.tensor(t).bytes() / micro_batches / (sequence_parallel ? key.tp : 1);
        break;
      }
    break;
  }
  return out;
}

}  // namespace

int count_layers(const ir::Graph& graph) {
  std::set<std::string_view> layers;
  for (const ir::Op& op : graph.ops)
    if (const std::string_view layer = policy::layer_of(op.name); op.pass == ir::Pass::forward && !layer.empty())
      layers.insert(layer);
  return static_cast<int>(layers.size());
}

Expected<MeasuredFacts> measure_cost_facts(const Job& loaded, const std::vector<search::Candidate>& candidates) {
  MeasuredFacts out;
  search::CostFacts& facts = out.facts;
  facts.layers = std::max(1, count_layers(loaded.graph));
  facts.forward_ops = static_cast<int>(std::ranges::count(loaded.graph.ops, ir::Pass::forward, &ir::Op::pass));
  if (facts.forward_ops == 0) return fail("the model has no forward op", "plan a model with a forward pass");
  facts.preset = !plans_a_graph(loaded.options);  // a preset, an --arch family or a model file: resized and folded
  facts.device_memory = loaded.cluster.gpu.memory_bytes;
  // The classes, each with the sequence parallelism its candidates take .
  std::vector<std::pair<search::ClassKey, bool>> classes;
  std::set<search::ClassKey> seen;
  for (const search::Candidate& c : candidates)
    if (seen.insert(search::class_of(c)).second) classes.emplace_back(search::class_of(c), c.config.sequence_parallel);
  std::ranges::sort(classes);  // the same facts whichever subset of the space asks (state: each tp's first class)
  std::vector<Expected<Slice>> slices(classes.size(), Expected<Slice>(fail("not measured")));
  for_each_on_both_cores(classes.size(), [&](std::size_t i) {
    slices[i] = measure_slice(loaded, classes[i].first, classes[i].second);
  });
  for (std::size_t i = 0; i < classes.size(); ++i) {
    ++out.slices;
    if (!slices[i]) {
      out.failed.push_back(classes[i].first);
      if (out.first_error.empty()) out.first_error = slices[i].error().to_string();
      continue;
    }
    facts.classes.emplace(classes[i].first, slices[i]->facts);
    facts.state.emplace(classes[i].first.tp, slices[i]->state);  // the first class of each tp
  }
  return out;
}

}  // namespace loom::api
