#include "parallel_options.h"

#include <algorithm>

#include <fmt/format.h>

namespace loom::cli {

void add_parallel_options(CLI::App* cmd, ParallelArgs* args) {
  cmd->add_option(args->devices_flag, args->gpus, "Devices (default 2; a one-degree policy puts all on it, dp-tp 2 on tp)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--dp", args->dp, "Data-parallel degree")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--tp", args->tp, "Tensor-parallel degree")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--pp", args->pp, "Pipeline stages")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--microbatches", args->micro_batches,
                  "Micro-batches per step: pipelined, or gradients accumulated (default 2 x stages with --pp)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--schedule", args->schedule, "Pipeline schedule: gpipe or 1f1b")->capture_default_str();
  cmd->add_option("--interleave", args->interleave,
                  "Model chunks per pipeline device: interleaved 1F1B over chunks of whole layers (micro-batches a "
                  "multiple of --pp)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--sp", args->sequence_parallel,
                "Sequence parallelism: split norms, dropouts and residual adds along the sequence over the tp ranks");
  cmd->add_option("--zero", args->zero,
                  "ZeRO stage over the dp ranks (policies zero, megatron): 1 partitions optimizer states, 2 also "
                  "gradients, 3 also parameters")
      ->check(CLI::Range(0, 3));
  cmd->add_option("--recompute", args->recompute, "Activation recomputation: none, selective or full")
      ->capture_default_str();
}

Expected<policy::ParallelConfig> parallel_config(const std::string& policy, const ParallelArgs& args) {
  policy::ParallelConfig config;
  if (args.dp > 0 || args.tp > 0 || args.pp > 0) {
    config.dp = std::max(args.dp, 1);
    config.tp = std::max(args.tp, 1);
    config.pp = std::max(args.pp, 1);
    if (args.gpus > 0 && policy::device_count(config) != args.gpus)
      return fail(fmt::format("--dp {} x --tp {} x --pp {} is {} devices, not {} {}", config.dp, config.tp, config.pp,
                              policy::device_count(config), args.devices_flag, args.gpus),
                  "give degrees whose product is the device count, or leave the device count out");
  } else {
    LOOM_ASSIGN_OR_RETURN(config, with_context(policy::default_degrees(policy, args.gpus > 0 ? args.gpus : 2),
                                               fmt::format("option {}", args.devices_flag)));
  }
  config.virtual_stages = args.interleave;
  config.sequence_parallel = args.sequence_parallel;
  config.zero = args.zero;
  LOOM_ASSIGN_OR_RETURN(config.recompute, with_context(policy::parse_recompute(args.recompute), "option --recompute"));
  if (args.micro_batches > 0) config.micro_batches = args.micro_batches;
  else config.micro_batches = config.pp > 1 ? 2 * config.pp : 1;
  if (args.schedule == "gpipe") config.schedule = plan::ScheduleKind::gpipe;
  else if (args.schedule == "1f1b") config.schedule = plan::ScheduleKind::one_f_one_b;
  else return fail(fmt::format("option --schedule: unknown schedule '{}'", args.schedule), "use gpipe or 1f1b");
  return config;
}

}  // namespace loom::cli
