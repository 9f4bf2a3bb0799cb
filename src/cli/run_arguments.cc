#include "run_arguments.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <span>

#include <fmt/format.h>

#include "loom/core/strings.h"
#include "loom/core/suggest.h"

namespace loom::cli {
namespace {

// torchrun's multi-node options, passed on under their own names in this order.
constexpr std::array<std::string_view, 8> kTorchrunOptions = {
    "--nnodes", "--node-rank", "--master-addr", "--master-port", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id",
    "--max-restarts"};
constexpr std::array<std::string_view, 2> kValuedOptions = {"--nproc", "--python"};  // loom run's own
constexpr std::array<std::string_view, 2> kFlags = {"--dry-run", "--standalone"};
// Those that name a rendezvous (--master-addr to --rdzv-id): with one, a one-node run is not --standalone.
constexpr std::span<const std::string_view> kRendezvousOptions = std::span(kTorchrunOptions).subspan(2, 5);

constexpr std::string_view kUsage =
    "loom run [--nproc N] [--nnodes N --node-rank R --master-addr HOST | --rdzv-backend c10d --rdzv-endpoint "
    "HOST:PORT --rdzv-id JOB] script.py [args...]";

// A whole number in [low, high]: the option's value, or an error naming the option and the range.
Expected<long> parse_count(std::string_view flag, const std::string& value, long low, long high,
                           std::string_view what) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || n < low || n > high)
    return fail(fmt::format("{}: '{}' is not {} from {} to {}", flag, value, what, low, high),
                fmt::format("give {} a whole number from {} to {}", flag, low, high));
  return n;
}

// --nnodes N or MIN:MAX (an elastic range, as torchrun's): the fewest and the most nodes.
Expected<std::pair<long, long>> node_range(const RunArgs& args) {
  const std::optional<std::string> nnodes = args.get("--nnodes");
  if (!nnodes) return std::pair{1L, 1L};
  const std::vector<std::string> parts = split(*nnodes, ':');
  if (parts.size() > 2)
    return fail(fmt::format("--nnodes: '{}' is not a node count N or a range MIN:MAX", *nnodes),
                "loom run --nnodes 2 ... script.py");
  LOOM_ASSIGN_OR_RETURN(const long low, parse_count("--nnodes", parts.front(), 1, 4096, "a node count"));
  LOOM_ASSIGN_OR_RETURN(const long high, parse_count("--nnodes", parts.back(), 1, 4096, "a node count"));
  if (high < low)
    return fail(fmt::format("--nnodes {}: the range's MIN is above its MAX", *nnodes), "give --nnodes MIN:MAX");
  return std::pair{low, high};
}

// The known option closest to a mistyped one (core/suggest.h), or the known option a longer spelling begins
// with, as torchrun's own names do ("--nproc-per-node" -> "--nproc"); "" when none is close.
std::string closest_option(std::string_view given) {
  std::vector<std::string> known;
  for (std::span<const std::string_view> names : {std::span<const std::string_view>(kTorchrunOptions),
                                                   std::span<const std::string_view>(kValuedOptions),
                                                   std::span<const std::string_view>(kFlags)})
    for (const std::string_view name : names) {
      if (given.starts_with(name)) return std::string(name);
      known.emplace_back(name);
    }
  return closest_match(given, known).value_or("");
}

Error unknown_option(const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  const std::string closest = closest_option(name);
  return Error{fmt::format("unknown option '{}' for `loom run` (before the script)", name),
               fmt::format("{}loom run's options are --nproc, --nnodes, --node-rank, --master-addr, --master-port, "
                           "--rdzv-backend, --rdzv-endpoint, --rdzv-id, --max-restarts, --standalone, --python, "
                           "--dry-run; the script's own options follow the script",
                           closest.empty() ? "" : fmt::format("did you mean {}? ", closest))};
}

// Checks what torchrun would only find once every node waits: a rendezvous for several nodes, a node rank
// for a static one, --standalone on one node only.
Expected<void> check_rendezvous(const RunArgs& args) {
  LOOM_ASSIGN_OR_RETURN(const auto nodes, node_range(args));
  const auto [fewest, most] = nodes;
  const std::optional<std::string> backend = args.get("--rdzv-backend"), endpoint = args.get("--rdzv-endpoint");
  const bool dynamic = backend && *backend != "static";
  if (std::optional<std::string> rank = args.get("--node-rank")) {
    LOOM_ASSIGN_OR_RETURN(const long r, parse_count("--node-rank", *rank, 0, 4095, "a node rank"));
    if (r >= most)
      return fail(fmt::format("--node-rank {} is not below --nnodes {}", r, most),
                  fmt::format("number the nodes 0 to {}", most - 1));
  }
  if (std::optional<std::string> port = args.get("--master-port"))
    LOOM_RETURN_IF_ERROR(parse_count("--master-port", *port, 1, 65535, "a port"));
  if (std::optional<std::string> restarts = args.get("--max-restarts"))
    LOOM_RETURN_IF_ERROR(parse_count("--max-restarts", *restarts, 0, 1000000, "a restart count"));
  if (args.standalone && most > 1)
    return fail(fmt::format("--standalone runs on one node, but --nnodes is {}", *args.get("--nnodes")),
                "drop --standalone and name the rendezvous: --master-addr HOST --node-rank R, or --rdzv-backend "
                "c10d --rdzv-endpoint HOST:PORT --rdzv-id JOB");
  if (args.standalone && args.names_rendezvous())
    return fail("--standalone picks its own rendezvous on this node, but a rendezvous option is given too",
                "drop --standalone, or the --master-*/--rdzv-* options");
  if (dynamic && !endpoint)
    return fail(fmt::format("--rdzv-backend {} needs --rdzv-endpoint HOST:PORT", *backend),
                "loom run --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node0:29400 --rdzv-id job1 script.py");
  if (most == 1 || dynamic) return {};
  // Several nodes, a static rendezvous (torchrun's default): a fixed count and every node's own rank.
  if (!endpoint && !args.get("--master-addr"))
    return fail(fmt::format("a run on {} nodes needs a rendezvous", *args.get("--nnodes")),
                fmt::format("on every node: loom run --nnodes {0} --node-rank R --master-addr NODE0 script.py (R from 0 "
                            "to {1}), or --rdzv-backend c10d --rdzv-endpoint NODE0:29400 --rdzv-id JOB",
                            *args.get("--nnodes"), most - 1));
  if (fewest != most)
    return fail(fmt::format("--nnodes {} (an elastic range) needs a dynamic rendezvous", *args.get("--nnodes")),
                "add --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id JOB, or give one node count");
  if (!args.get("--node-rank"))
    return fail(fmt::format("a static rendezvous on {} nodes needs each node's --node-rank", most),
                fmt::format("give every node its own --node-rank from 0 (the --master-addr node) to {} (or use "
                            "--rdzv-backend c10d, which numbers the nodes)", most - 1));
  return {};
}

}  // namespace

std::optional<std::string> RunArgs::get(std::string_view flag) const {
  const auto it = torchrun.find(std::string(flag));
  return it == torchrun.end() ? std::nullopt : std::optional(it->second);
}

bool RunArgs::names_rendezvous() const {
  return std::ranges::any_of(kRendezvousOptions, [&](std::string_view flag) { return get(flag).has_value(); });
}

Expected<RunArgs> parse_run_args(const std::vector<std::string>& words) {
  RunArgs args;
  bool script_seen = false;
  const auto is_one_of = [](const auto& names, std::string_view arg) {
    return std::ranges::any_of(names, [&](std::string_view name) {
      return arg == name || (arg.starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=');
    });
  };
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& arg = words[i];
    if (arg == "--") {
      for (std::size_t j = i + 1; j < words.size(); ++j) {
        if (!script_seen) args.script = words[j], script_seen = true;
        else args.script_args.push_back(words[j]);
      }
      break;
    }
    if (arg == "--dry-run") {
      args.dry_run = true;
    } else if (arg == "--standalone") {
      args.standalone = true;
    } else if (is_one_of(kValuedOptions, arg) || is_one_of(kTorchrunOptions, arg)) {
      const std::size_t eq = arg.find('=');
      const std::string flag = arg.substr(0, eq);
      std::string value;
      if (eq != std::string::npos) value = arg.substr(eq + 1);
      else if (i + 1 < words.size()) value = words[++i];
      else return fail(fmt::format("option {} needs a value", flag), std::string(kUsage));
      if (value.empty()) return fail(fmt::format("option {} has an empty value", flag), std::string(kUsage));
      if (flag == "--python") {
        args.python = value;
      } else if (flag == "--nproc") {
        LOOM_ASSIGN_OR_RETURN(const long n, parse_count("--nproc", value, 1, 4096, "a process count"));
        args.nproc = static_cast<int>(n);
      } else {
        args.torchrun[flag] = value;
      }
    } else if (!script_seen && arg.starts_with("-")) {
      return std::unexpected(unknown_option(arg));
    } else if (!script_seen) {
      args.script = arg;
      script_seen = true;
    } else {
      args.script_args.push_back(arg);
    }
  }
  LOOM_RETURN_IF_ERROR(check_rendezvous(args));
  if (!script_seen) return fail("loom run needs a script", "loom run train.py --nproc 4 [args...]");
  return args;
}

std::vector<std::string> torchrun_arguments(const RunArgs& args) {
  std::vector<std::string> argv;
  const bool one_node = node_range(args).value_or(std::pair{1L, 1L}).second == 1;  // parse_run_args checked it
  if (args.standalone || (one_node && !args.names_rendezvous())) argv.emplace_back("--standalone");
  if (std::optional<std::string> nnodes = args.get("--nnodes")) argv.insert(argv.end(), {"--nnodes", *nnodes});
  argv.insert(argv.end(), {"--nproc-per-node", std::to_string(args.nproc)});
  for (std::string_view flag : std::span(kTorchrunOptions).subspan(1))  // after --nnodes
    if (std::optional<std::string> value = args.get(flag)) argv.insert(argv.end(), {std::string(flag), *value});
  argv.push_back(args.script);
  argv.insert(argv.end(), args.script_args.begin(), args.script_args.end());
  return argv;
}

}  // namespace loom::cli
