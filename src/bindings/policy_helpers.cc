#include "policy_helpers.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "loom/plan/batch.h"
#include "loom/plan/micro_batches.h"
#include "loom/plan/schedule.h"
#include "loom/policy/policy.h"
#include "loom/policy/recompute_policy.h"
#include "loom/policy/stages.h"
#include "loom/policy/tensor_parallel.h"
#include "plan_object.h"
#include "raise.h"

namespace py = pybind11;

namespace loom::bindings {
namespace {

std::vector<plan::SubOpId> sub_ops(const PlanView& v, const std::vector<std::int64_t>& ids) {
  std::vector<plan::SubOpId> out;
  for (std::int64_t id : ids) out.push_back(v.sub_op(id, false));
  return out;
}

plan::BlockPart parse_part(std::string_view part) {
  if (part == "F") return plan::BlockPart::forward;
  if (part == "B") return plan::BlockPart::backward;
  if (part == "W") return plan::BlockPart::weight;
  raise(Error{fmt::format("block part '{}' is not F, B or W", part)});
}

void bind_config(py::module_& m) {
  using policy::ParallelConfig;
  py::class_<ParallelConfig>(m, "Config", "the job's resolved degrees (policy::ParallelConfig), read-only")
      .def_readonly("dp", &ParallelConfig::dp)
      .def_readonly("tp", &ParallelConfig::tp)
      .def_readonly("pp", &ParallelConfig::pp)
      .def_readonly("micro_batches", &ParallelConfig::micro_batches)
      .def_readonly("virtual_stages", &ParallelConfig::virtual_stages)
      .def_readonly("sequence_parallel", &ParallelConfig::sequence_parallel)
      .def_readonly("zero", &ParallelConfig::zero)
      .def_property_readonly("schedule", [](const ParallelConfig& c) { return std::string(plan::name(c.schedule)); })
      .def_property_readonly("block_order",
                             [](const ParallelConfig& c) { return std::string(plan::name(c.block_order)); })
      .def_property_readonly("recompute", [](const ParallelConfig& c) { return std::string(policy::name(c.recompute)); })
      .def_property_readonly("coshard", [](const ParallelConfig& c) { return c.coshard.parts; },
                             "coshard's parts per tp rank (0 or 1: off)")
      .def_property_readonly("overlap", [](const ParallelConfig& c) { return std::string(policy::name(c.overlap)); })
      .def_readonly("interlaced", &ParallelConfig::interlaced)
      .def_readonly("layer_tp", &ParallelConfig::layer_tp, "per-layer tensor-parallel degrees (empty: tp everywhere)")
      .def_property_readonly("devices", &policy::device_count, "dp x tp x pp")
      .def("__repr__", [](const ParallelConfig& c) {
        return fmt::format("<loom Config dp {} x tp {} x pp {}, {} micro-batches>", c.dp, c.tp, c.pp, c.micro_batches);
      });
  py::class_<plan::Block>(m, "Block", "a block of a pipeline schedule: stage, micro_batch, part ('F', 'B', 'W')")
      .def_readonly("stage", &plan::Block::stage)
      .def_readonly("micro_batch", &plan::Block::micro_batch)
      .def_property_readonly("part", [](const plan::Block& b) { return std::string(1, plan::part_letter(b.part)); })
      .def("__repr__",
           [](const plan::Block& b) { return fmt::format("<Block stage {} {}>", b.stage, plan::to_string(b)); });
  py::class_<policy::TensorParallelLayout>(
      m, "TensorParallelLayout", "where Megatron-style tensor parallelism splits each op (policy/tensor_parallel.h)")
      .def_readonly("splits", &policy::TensorParallelLayout::splits,
                    "by op id, forward ops: a Split, or None (replicate)")
      .def_readonly("tensor_dims", &policy::TensorParallelLayout::tensor_dims,
                    "by tensor id: the dimension split across the tp ranks (-1: whole, or partial sums)")
      .def_readonly("sequence_split", &policy::TensorParallelLayout::sequence_split);
}

}  // namespace

void bind_policy_helpers(py::module_& m) {
  bind_config(m);
  m.def(
      "batch_identifiers", [](const PlanHandle& v) { return plan::batch_identifiers(v->get()); }, py::arg("plan"),
      "by op id: the identifier along the batch of each forward op that sees it, else None (plan/batch.h)");
  m.def(
      "split_micro_batches",
      [](const PlanHandle& v, const std::vector<std::int64_t>& op_ids, int n) {
        std::vector<ir::OpId> ops;
        for (std::int64_t id : op_ids) ops.push_back(v->op(id));
        const plan::MicroBatches mb = checked(plan::split_micro_batches(v->get(), ops, n));
        std::vector<std::vector<std::int64_t>> out;
        for (const auto& parts : mb.parts) out.push_back(ids_of(parts));
        return out;
      },
      py::arg("plan"), py::arg("ops"), py::arg("n"),
      "splits each forward op along its batch identifier into n micro-batches; returns [op][k] sub-op ids");
  m.def(
      "tensor_parallel_layout",
      [](const PlanHandle& v, int tp, bool sequence_parallel) {
        return checked(policy::tensor_parallel_layout(v->get(), tp, sequence_parallel));
      },
      py::arg("plan"), py::arg("tp"), py::arg("sequence_parallel") = false,
      "Megatron's column / row-parallel regions, vocabulary-parallel heads and embeddings, by op and tensor");
  m.def(
      "megatron_stages",
      [](const PlanHandle& v, const policy::ParallelConfig& config) {
        return checked(policy::megatron_stages(v->get(), config, *v->catalog));
      },
      py::arg("plan"), py::arg("config"), "by op id: the pipeline stage megatron gives each forward op, -1 for others");
  m.def(
      "pipeline_stages",
      [](const PlanHandle& v, int stages) { return checked(policy::pipeline_stages(v->get(), stages, *v->catalog)); },
      py::arg("plan"), py::arg("stages"), "by op id: stages of balanced training FLOPs, -1 for non-forward ops");
  m.def(
      "layer_stages", [](const PlanHandle& v, int stages) { return checked(policy::layer_stages(v->get(), stages)); },
      py::arg("plan"), py::arg("stages"), "by op id: stages of equal whole-layer counts, -1 for non-forward ops");
  m.def("device_of", &policy::device_of, py::arg("config"), py::arg("pp_rank"), py::arg("dp_rank"), py::arg("tp_rank"),
        "Megatron's device numbering: (pp_rank x dp + dp_rank) x tp + tp_rank");
  m.def(
      "pipeline_device",
      [](const std::string& schedule, int stage, int devices) {
        return plan::pipeline_device(checked(plan::parse_schedule_kind(schedule)), stage, devices);
      },
      py::arg("schedule"), py::arg("stage"), py::arg("devices"), "the pipeline device that runs a stage");
  m.def(
      "apply_schedule",
      [](const PlanHandle& v, const std::string& schedule, int chunks,
         const std::vector<std::vector<std::vector<std::int64_t>>>& stages, const std::string& block_order) {
        std::vector<std::vector<std::vector<plan::SubOpId>>> blocks;
        for (const auto& stage : stages) {
          auto& out = blocks.emplace_back();
          for (const auto& micro_batch : stage) out.push_back(sub_ops(*v, micro_batch));
        }
        const plan::Schedule kind{.kind = checked(plan::parse_schedule_kind(schedule)),
                                  .chunks = chunks,
                                  .block_order = checked(plan::parse_block_order(block_order))};
        return checked(plan::apply_schedule(v->get(), kind, blocks));
      },
      py::arg("plan"), py::arg("schedule"), py::arg("chunks"), py::arg("stages"), py::arg("block_order") = "strict",
      "orders stages[s][m] (forward sub-ops of stage s, micro-batch m) by the schedule template, each block after "
      "the whole block before it (block_order 'strict') or after its first sub-op only ('hoist'); returns each "
      "pipeline device's blocks");
  m.def(
      "block_sub_ops",
      [](const PlanHandle& v, const std::vector<std::int64_t>& forward, const std::string& part) {
        return ids_of(plan::block_sub_ops(v->get(), sub_ops(*v, forward), parse_part(part)));
      },
      py::arg("plan"), py::arg("forward"), py::arg("part"),
      "the sub-ops of one block: the forward list ('F'), or their backward ('B') or weight ('W') parts reversed");
  m.def(
      "apply_recompute",
      [](const PlanHandle& v, const std::string& recompute) {
        checked(policy::apply_recompute(v->get(), checked(policy::parse_recompute(recompute)), *v->catalog));
      },
      py::arg("plan"), py::arg("recompute"), "marks activations for recomputation: 'none', 'selective', 'full' or 'memory-bound'");
}

}  // namespace loom::bindings
