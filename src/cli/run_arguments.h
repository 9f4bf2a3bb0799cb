// `loom run`'s command line: its own options and torchrun's multi-node options before (or after) the
// script, the script's arguments after it, checked before anything runs (run_command.cc execs the result).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::cli {

struct RunArgs {
  std::string script;
  int nproc = 1;
  std::string python;
  bool dry_run = false;
  bool standalone = false;                       // --standalone given
  std::map<std::string, std::string> torchrun;  // torchrun's multi-node options given: "--nnodes" -> "2"
  std::vector<std::string> script_args;  // after the script: all but loom run's own options (all after --)

  std::optional<std::string> get(std::string_view flag) const;
  bool names_rendezvous() const;  // --master-addr, --master-port or an --rdzv-* option given
};

// loom run's arguments: its own options (--nproc N, --python PATH, --dry-run, --standalone, torchrun's
// multi-node options; also --option=value) anywhere before `--`, the first other word is the script, the
// rest (in order, and all after `--`) the script's. An unknown option before the script is an error, with
// the closest known one; so are a multi-node run without a rendezvous, a static one without the node's
// rank, and --standalone on several nodes.
Expected<RunArgs> parse_run_args(const std::vector<std::string>& words);

// torchrun's arguments (after `python -m torch.distributed.run`): --standalone on one node without a
// rendezvous, the multi-node options given under their own names, --nproc-per-node, then the script and
// its arguments.
std::vector<std::string> torchrun_arguments(const RunArgs& args);

}  // namespace loom::cli
