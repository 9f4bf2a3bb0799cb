#include "loom/codegen/rank_programs.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "buffer_names.h"
#include "donated_inputs.h"
#include "loom/core/sha256.h"
#include "loom/core/strings.h"
#include "loom/exec/instruction_buffers.h"
#include "loom/plan/residence.h"
#include "manifest.h"

namespace loom::codegen {
namespace {

using detail::piece_literal;
using detail::python_string;
using nlohmann::json;

// What every member of one collective reads and writes, in group order: each member's call names all
// of them, so the runtime can place the others' pieces without asking. A start has one per buffer.
struct CollectiveMembers {
  std::vector<plan::SubTensor> inputs, outputs;
};

Expected<std::map<std::int64_t, std::vector<CollectiveMembers>>> collective_members(const exec::ExecPlan& exec) {
  std::map<std::int64_t, std::vector<std::pair<int, exec::CollectiveCall>>> by_tag;
  for (int d = 0; d < exec.num_devices; ++d)
    for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(d)])
      if (const auto c = exec::collective_call(instruction)) by_tag[c->tag].emplace_back(d, *c);
  std::map<std::int64_t, std::vector<CollectiveMembers>> members;
  for (auto& [tag, calls] : by_tag) {
    const std::span<const int> group = calls.front().second.group;
    if (calls.size() != group.size())
      return failf("collective tag {} has {} members but a group of {}", tag, calls.size(), group.size());
    std::vector<CollectiveMembers>& m = members[tag];
    m.resize(calls.front().second.inputs.size());
    for (int device : group) {
      const auto it = std::ranges::find_if(calls, [&](const auto& call) { return call.first == device; });
      if (it == calls.end()) return failf("collective tag {}: device {} of its group never joins it", tag, device);
      if (it->second.inputs.size() != m.size())
        return failf("collective tag {}: device {} moves {} buffers, another {}", tag, device, it->second.inputs.size(), m.size());
      for (std::size_t i = 0; i < m.size(); ++i) {
        m[i].inputs.push_back(exec.buffer(it->second.inputs[i]).piece);
        m[i].outputs.push_back(exec.buffer(it->second.outputs[i]).piece);
      }
    }
  }
  return members;
}

std::string tuple_of(const std::vector<std::string>& items) {
  return "(" + join(items, ", ") + (items.size() == 1 ? ",)" : ")");
}

std::string pieces_literal(const std::vector<plan::SubTensor>& pieces) {
  std::vector<std::string> items;
  for (const plan::SubTensor& p : pieces) items.push_back(piece_literal(p));
  return tuple_of(items);
}

std::string tuple_literal(const std::vector<int>& values) {
  return fmt::format("({}{})", fmt::join(values, ", "), values.size() == 1 ? "," : "");
}

std::string_view method_of(comm::Primitive kind) {
  switch (kind) {
    case comm::Primitive::all_reduce: return "all_reduce";
    case comm::Primitive::all_gather: return "all_gather";
    case comm::Primitive::reduce_scatter: return "reduce_scatter";
    default: return "all_to_all";
  }
}

// One rank's module. `names` by BufferId; `updated` by TensorId: the persistent tensor a loaded leaf
// becomes after the step (invalid when the step does not update it).
class ModuleWriter {
 public:
  ModuleWriter(const exec::ExecPlan& exec, int rank, const std::vector<std::string>& names,
               const std::map<std::int64_t, std::vector<CollectiveMembers>>& members, const std::vector<ir::TensorId>& updated)
      : exec_(exec), graph_(*exec.plan->graph), rank_(rank), names_(names), members_(members), updated_(updated),
        donated_(detail::donated_optimizer_inputs(exec, rank)) {}

  Expected<std::string> write(std::string_view description) {
    const auto& program = exec_.programs[static_cast<std::size_t>(rank_)];
    out_ = fmt::format(
        "# Loom rank program: rank {} of {}, generated from the plan's ExecPlan (docs/codegen.md).\n"
        "# plan: {}\n"
        "# {} instructions, one statement each; run it with `python -m loom.runtime.launch DIR`.\n\n\n"
        "def step(rt):\n",
        rank_, exec_.num_devices, description, program.size());
    for (std::size_t i = 0; i < program.size(); ++i) {
      index_ = i;
      LOOM_RETURN_IF_ERROR(std::visit([&](const auto& in) { return emit(in); }, program[i]));
    }
    LOOM_RETURN_IF_ERROR(keep_updated());
    if (program.empty()) line("pass");
    return out_;
  }

 private:
  void line(std::string_view text) { out_ += fmt::format("    {}\n", text); }
  void comment(std::string_view text) { line(fmt::format("# {}", text)); }
  const std::string& var(exec::BufferId b) const { return names_[b.index()]; }
  const plan::SubTensor& piece(exec::BufferId b) const { return exec_.buffer(b).piece; }
  const std::string& tensor_name(exec::BufferId b) const { return graph_.tensor(piece(b).tensor).name; }
  std::string handle(const exec::CollectiveStart& in) const {
    const bool gather = in.kind == comm::Primitive::all_gather;
    return fmt::format("{}_{}", gather ? "gather" : in.kind == comm::Primitive::reduce_scatter ? "scatter" : "bucket", in.tag);
  }
  // A buffer's name, or, for a chained start's input (an output of a start not waited yet), the
  // runtime's read of it from its start's handle.
  std::string operand(exec::BufferId b) const {
    const auto it = in_flight_.find(b.value);
    return it != in_flight_.end() ? it->second : var(b);
  }

  // A start (exec/passes.h): a gradient bucket, issued once its last gradient is final and waited before
  // its sums are read; prefetched parameters, issued ahead of their reader and waited right before it; or
  // an activation's partial sums (Oases), issued after their writer and waited right before their reader.
  Expected<void> emit(const exec::CollectiveStart& in) {
    std::int64_t bytes = 0;
    std::vector<std::string> inputs, tensors;
    for (exec::BufferId b : in.inputs) {
      inputs.push_back(operand(b));
      tensors.push_back(tensor_name(b));
      bytes += exec_.buffer(b).bytes;
    }
    const bool gather = in.kind == comm::Primitive::all_gather;
    const bool by_member = gather || in.kind == comm::Primitive::reduce_scatter;  // pieces differ by member
    const ir::FullTensor& first = graph_.tensor(piece(in.outputs.front()).tensor);
    const bool gradients = ir::is_parameter_gradient(graph_, first.id);
    const bool prefetch = gather && first.role == ir::TensorRole::parameter;
    const bool chained = std::ranges::any_of(in.inputs, [&](exec::BufferId b) { return in_flight_.contains(b.value); });
    comment(fmt::format("{} start #{} over ranks {} ({} B, {} tensors: {}): runs while the step goes on, as {}",
                        comm::name(in.kind), in.tag, tuple_literal(in.group), bytes, in.inputs.size(), join(tensors, ", "),
                        prefetch    ? "DeepSpeed's parameter prefetch"
                        : gradients ? "DDP's bucketed reduction"
                        : in.kind == comm::Primitive::all_reduce && !chained
                            ? "Oases' overlapped tensor-parallel all-reduce"
                            : "a link of Oases' overlapped hierarchical sum"));
    if (by_member) {
      const auto it = members_.find(in.tag);
      if (it == members_.end()) return failf("start #{} has no members", in.tag);
      std::vector<std::string> ins, outs;
      for (const CollectiveMembers& m : it->second) {
        ins.push_back(pieces_literal(m.inputs));
        outs.push_back(pieces_literal(m.outputs));
      }
      line(fmt::format("{} = rt.{}_start({}, group={}, tag={}, ins={}, outs={})", handle(in), method_of(in.kind),
                       tuple_of(inputs), tuple_literal(in.group), in.tag, tuple_of(ins), tuple_of(outs)));
    } else {
      // A bucket's flat buffer is kept for the next step; an activation's sums die with their last reader.
      line(fmt::format("{} = rt.{}_start({}, group={}, bucket={}{})", handle(in), method_of(in.kind), tuple_of(inputs),
                       tuple_literal(in.group), in.tag, gradients ? "" : ", reuse=False"));
    }
    started_.emplace(in.tag, &in);
    for (std::size_t k = 0; k < in.outputs.size(); ++k)
      in_flight_.emplace(in.outputs[k].value, fmt::format("rt.chained({}, {})", handle(in), k));
    return {};
  }

  Expected<void> emit(const exec::CollectiveWait& in) {
    const auto it = started_.find(in.tag);
    if (it == started_.end()) return failf("rank {} waits for #{}, which it never started", rank_, in.tag);
    std::vector<std::string> outputs;
    for (exec::BufferId b : it->second->outputs) {
      outputs.push_back(var(b));
      in_flight_.erase(b.value);
    }
    comment(fmt::format("the {} of #{}", it->second->kind == comm::Primitive::all_gather ? "gathered tensors" : "sums", in.tag));
    line(fmt::format("{}{} = rt.wait({})", join(outputs, ", "), outputs.size() == 1 ? "," : "", handle(*it->second)));
    return {};
  }

  Expected<void> emit(const exec::Load& in) {
    const plan::SubTensor& p = piece(in.output);
    comment(fmt::format("load {} '{}' {}", ir::name(graph_.tensor(p.tensor).role), tensor_name(in.output), p.to_string()));
    const bool host = exec_.buffer(in.output).memory == exec::Memory::host;  // an offloaded state
    line(fmt::format("{} = rt.load({}, {}{})", var(in.output), python_string(tensor_name(in.output)), piece_literal(p),
                     host ? ", host=True" : ""));
    loads_.push_back(in.output);
    return {};
  }

  Expected<void> emit(const exec::Compute& in) {
    const plan::SubOp& s = exec_.plan->sub_op(in.sub_op);
    const ir::Op& op = graph_.op(s.op);
    comment(fmt::format("{} ({}{})", s.name, op.type,
                        op.is_mirror() ? fmt::format(", backward of '{}'", graph_.op(op.mirror_of).name) : ""));
    std::vector<std::string> args, outs;
    for (exec::BufferId b : in.inputs) args.push_back(b.valid() ? var(b) : "None");
    for (exec::BufferId b : in.outputs) outs.push_back(var(b));
    std::string donate;
    if (const auto it = donated_.find(index_); it != donated_.end()) {
      comment("its old parameter and states die here: the step may write them in place (as torch.optim)");
      donate = fmt::format(", donate={}", tuple_literal(it->second));
    }
    line(fmt::format("{}{} = rt.compute({}{}{}{})", join(outs, ", "), outs.size() == 1 ? "," : "", in.sub_op.value,
                     args.empty() ? "" : ", ", join(args, ", "), donate));
    for (exec::BufferId b : in.outputs)
      if (piece(b).tensor == graph_.loss) line(fmt::format("rt.keep({}, {}, {})", python_string(tensor_name(b)), var(b), piece_literal(piece(b))));
    return {};
  }

  Expected<void> emit(const exec::Collective& in) {
    const auto it = members_.find(in.tag);
    if (it == members_.end()) return failf("collective tag {} has no members", in.tag);
    const auto tag = static_cast<std::size_t>(in.tag);
    const exec::CollectiveInfo* info = tag < exec_.collectives.size() ? &exec_.collectives[tag] : nullptr;
    std::string why = info != nullptr && !info->rule.empty() ? info->rule : std::string(comm::name(in.kind));
    if (info != nullptr && info->paired >= 0) why += fmt::format(" (autograd pair: tag {})", info->paired);
    comment(fmt::format("{} of '{}' over ranks {}: {}", comm::name(in.kind), tensor_name(in.input), tuple_literal(in.group), why));
    const CollectiveMembers& m = it->second.front();
    line(fmt::format("{} = rt.{}({}, group={}, tag={}, ins={}, outs={})", var(in.output), method_of(in.kind), var(in.input),
                     tuple_literal(in.group), in.tag, pieces_literal(m.inputs), pieces_literal(m.outputs)));
    return {};
  }

  Expected<void> emit(const exec::Send& in) {
    comment(fmt::format("send '{}' {} to rank {}", tensor_name(in.buffer), piece(in.buffer).to_string(), in.peer));
    line(fmt::format("rt.send({}, peer={}, tag={})", var(in.buffer), in.peer, in.tag));
    return {};
  }

  Expected<void> emit(const exec::Recv& in) {
    const plan::SubTensor& p = piece(in.buffer);
    comment(fmt::format("receive '{}' {} from rank {}", tensor_name(in.buffer), p.to_string(), in.peer));
    line(fmt::format("{} = rt.recv(peer={}, tag={}, piece={}, dtype={})", var(in.buffer), in.peer, in.tag, piece_literal(p),
                     python_string(ir::name(graph_.tensor(p.tensor).dtype))));
    return {};
  }

  Expected<void> emit(const exec::Local& in) {
    const plan::SubTensor& out = piece(in.output);
    comment(fmt::format("{} into '{}' {}", exec::name(in.kind), tensor_name(in.output), out.to_string()));
    if (in.kind == exec::LocalKind::combine || in.kind == exec::LocalKind::accumulate) {
      std::vector<std::string> parts;
      for (exec::BufferId b : in.inputs) parts.push_back(fmt::format("({}, {})", var(b), piece_literal(piece(b))));
      line(fmt::format("{} = rt.{}([{}], {})", var(in.output), exec::name(in.kind), join(parts, ", "), piece_literal(out)));
      return {};
    }
    if (in.inputs.size() != 1) return failf("a {} on rank {} has {} inputs", exec::name(in.kind), rank_, in.inputs.size());
    if (in.kind == exec::LocalKind::copy) {  // ZeRO-Offload's move between GPU and host memory
      const bool to_host = exec_.buffer(in.output).memory == exec::Memory::host;
      line(fmt::format("{} = rt.{}({})", var(in.output), to_host ? "to_host" : "to_device", var(in.inputs[0])));
      return {};
    }
    line(fmt::format("{} = rt.{}({}, {}, {})", var(in.output), exec::name(in.kind), var(in.inputs[0]),
                     piece_literal(piece(in.inputs[0])), piece_literal(out)));
    return {};
  }

  Expected<void> emit(const exec::Free& in) {
    line(fmt::format("del {}", var(in.buffer)));
    freed_.insert(in.buffer.value);
    return {};
  }

  // The step closes (plan/residence.h): each loaded piece of an updated tensor ends in a buffer of its
  // next version, which the runtime reports as that tensor's result.
  Expected<void> keep_updated() {
    bool first = true;
    for (exec::BufferId loaded : loads_) {
      const ir::TensorId next = updated_[piece(loaded).tensor.index()];
      if (!next.valid()) continue;
      std::optional<exec::BufferId> end;
      for (std::size_t b = 0; b < exec_.buffers.size(); ++b) {
        const exec::Buffer& buffer = exec_.buffers[b];
        if (buffer.device != rank_ || buffer.piece.tensor != next || freed_.contains(static_cast<std::uint32_t>(b))) continue;
        plan::SubTensor same = buffer.piece;
        same.tensor = piece(loaded).tensor;
        if (same.value.is_whole() && plan::same_piece(same, piece(loaded), false)) end = exec::BufferId(static_cast<std::uint32_t>(b));
      }
      if (!end)
        return fail(fmt::format("rank {} loads {} of '{}' but ends the step without that piece of '{}'", rank_,
                                piece(loaded).to_string(), tensor_name(loaded), graph_.tensor(next).name),
                    "the ExecPlan does not close its step (plan/residence.h); codegen needs a closed step");
      if (first) comment("the step's results: updated parameters and optimizer states, where the next step loads them");
      first = false;
      line(fmt::format("rt.keep({}, {}, {})", python_string(graph_.tensor(next).name), var(*end), piece_literal(piece(*end))));
    }
    return {};
  }

  const exec::ExecPlan& exec_;
  const ir::Graph& graph_;
  int rank_;
  const std::vector<std::string>& names_;
  const std::map<std::int64_t, std::vector<CollectiveMembers>>& members_;
  const std::vector<ir::TensorId>& updated_;
  std::map<std::int64_t, const exec::CollectiveStart*> started_;  // by tag: this rank's starts so far
  std::unordered_map<std::uint32_t, std::string> in_flight_;      // by buffer: started outputs not waited yet
  const std::map<std::size_t, std::vector<int>> donated_;  // instruction index -> optimizer inputs that die there
  std::size_t index_ = 0;                                  // the instruction being emitted
  std::string out_;
  std::vector<exec::BufferId> loads_;
  std::set<std::uint32_t> freed_;
};

// The manifest with one line per top-level field, per tensor, per sub-op and per rank's loads: readable
// and diffable without a line per number.
std::string manifest_text(const json& manifest) {
  std::vector<std::string> fields;
  for (const auto& [key, value] : manifest.items()) {
    std::vector<std::string> items;
    if (value.is_object() && !value.empty()) {
      for (const auto& [k, v] : value.items()) items.push_back(fmt::format("  {}: {}", json(k).dump(), v.dump()));
      fields.push_back(fmt::format(" {}: {{\n{}\n }}", json(key).dump(), join(items, ",\n")));
    } else if (key == "loads") {
      for (const json& v : value) items.push_back("  " + v.dump());
      fields.push_back(fmt::format(" {}: [\n{}\n ]", json(key).dump(), join(items, ",\n")));
    } else {
      fields.push_back(fmt::format(" {}: {}", json(key).dump(), value.dump()));
    }
  }
  return "{\n" + join(fields, ",\n") + "\n}\n";
}

Expected<void> check_emittable(const exec::ExecPlan& exec) {
  if (exec.plan == nullptr || exec.plan->graph == nullptr) return fail("codegen: the ExecPlan has no plan");
  if (exec.num_devices < 1 || exec.programs.size() != static_cast<std::size_t>(exec.num_devices))
    return failf("codegen: the ExecPlan has {} programs for {} devices", exec.programs.size(), exec.num_devices);
  return {};
}

}  // namespace

std::string rank_module_file(int rank) { return fmt::format("rank_{}.py", rank); }

Expected<RankPrograms> emit_rank_programs(const exec::ExecPlan& exec, std::string_view description) {
  LOOM_RETURN_IF_ERROR(check_emittable(exec));
  const ir::Graph& graph = *exec.plan->graph;
  LOOM_ASSIGN_OR_RETURN(auto members, collective_members(exec));
  std::vector<ir::TensorId> updated(graph.tensors.size());
  for (const ir::FullTensor& t : graph.tensors)
    if (t.updates.valid() && plan::persists(graph, t.updates)) updated[t.updates.index()] = t.id;
  const std::vector<std::string> names = detail::buffer_variables(exec);

  RankPrograms out;
  json manifest{{"format", 2},
                {"world_size", exec.num_devices},
                {"description", std::string(description)},
                {"loss", graph.loss.valid() ? json(graph.tensor(graph.loss).name) : json(nullptr)}};
  json ranks = json::array(), loads = json::array(), tensors = json::object(), sub_ops = json::object();
  std::set<std::vector<int>> groups;
  for (int r = 0; r < exec.num_devices; ++r) {
    ModuleWriter writer(exec, r, names, members, updated);
    LOOM_ASSIGN_OR_RETURN(std::string module, with_context(writer.write(description), fmt::format("rank {}", r)));
    out.modules.push_back(std::move(module));
    ranks.push_back(rank_module_file(r));
    json rank_loads = json::array();
    for (const exec::Instruction& instruction : exec.programs[static_cast<std::size_t>(r)]) {
      if (const auto* load = std::get_if<exec::Load>(&instruction)) {
        const plan::SubTensor& p = exec.buffer(load->output).piece;
        const std::string& name = graph.tensor(p.tensor).name;
        tensors[name] = detail::tensor_entry(graph, p.tensor);
        if (const json& entry = tensors[name]; entry.contains("copy_of")) {
          // As a string: clang finds std::string == json ambiguous (json's own operator== or the rewritten one).
          const std::string copy_of = entry["copy_of"].get<std::string>();
          for (const ir::FullTensor& t : graph.tensors)
            if (t.name == copy_of) tensors[t.name] = detail::tensor_entry(graph, t.id);
        }
        if (const ir::FullTensor& t = graph.tensor(p.tensor); t.derived)  // the runtime counts its whole labels
          tensors[graph.tensor(t.derived->from).name] = detail::tensor_entry(graph, t.derived->from);
        json box = json::array();
        for (const plan::IndexRange& range : p.box) {
          const plan::IndexRange n = range.normalized();
          box.push_back({n.start, n.stop, n.step});
        }
        rank_loads.push_back({{"tensor", name}, {"box", box}, {"part", {p.value.index, p.value.count}}});
        if (const ir::TensorId next = updated[p.tensor.index()]; next.valid()) {
          json entry = detail::tensor_entry(graph, next);
          entry["updates"] = name;
          tensors[graph.tensor(next).name] = entry;
        }
      } else if (const auto* compute = std::get_if<exec::Compute>(&instruction)) {
        LOOM_ASSIGN_OR_RETURN(json entry, detail::sub_op_entry(*exec.plan, compute->sub_op));
        sub_ops[std::to_string(compute->sub_op.value)] = std::move(entry);
      } else if (const auto* collective = std::get_if<exec::Collective>(&instruction)) {
        groups.insert(collective->group);
      } else if (const auto* start = std::get_if<exec::CollectiveStart>(&instruction)) {
        groups.insert(start->group);
      }
    }
    loads.push_back(std::move(rank_loads));
  }
  if (graph.loss.valid()) tensors[graph.tensor(graph.loss).name] = detail::tensor_entry(graph, graph.loss);
  manifest["ranks"] = ranks;
  manifest["groups"] = groups;
  manifest["loads"] = loads;
  manifest["tensors"] = tensors;
  manifest["sub_ops"] = sub_ops;
  // Ties the files to this plan (docs/codegen.md, "The manifest"): each module's sha256, and the plan id, a
  // hash of everything emitted from the ExecPlan (this manifest's other fields and every module's digest).
  json digests = json::array();
  for (const std::string& module : out.modules) digests.push_back(sha256_hex(module));
  manifest["rank_sha256"] = digests;
  manifest["plan_id"] = sha256_hex(manifest_text(manifest));
  out.manifest = manifest_text(manifest);
  return out;
}

}  // namespace loom::codegen
