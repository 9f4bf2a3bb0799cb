// `loom run [OPTIONS] script.py [args...]`: runs a user's training script (one that calls loom.parallelize)
// under torchrun: execs `<python> -m torch.distributed.run [--standalone] [--nnodes ...] --nproc-per-node N
// [rendezvous options] script.py args...` with python/ (and this build's extension dir) on PYTHONPATH. One
// node without a rendezvous is --standalone; several nodes name their rendezvous (static: --master-addr and
// each node's --node-rank; dynamic: --rdzv-backend c10d --rdzv-endpoint --rdzv-id), checked here so a
// mistyped launch fails before any node waits for the others (run_arguments.h). The Python: --python, else $LOOM_PYTHON,
// else the repository's .venv, else python3. The exit code is torchrun's (non-zero when a rank fails).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>

#include <fmt/format.h>

#include "commands.h"
#include "loom/core/strings.h"
#include "run_arguments.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

bool is_executable(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// A name without a slash is looked up on PATH, as execvp would.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split(path ? path : "", ':'))
    if (!dir.empty() && is_executable(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  return "";
}

Expected<std::string> find_python(const std::string& requested) {
  const auto check = [](const std::string& python, std::string_view source) -> Expected<std::string> {
    std::string found = resolve_program(python);
    if (found.empty())
      return fail(fmt::format("{} names the Python '{}', which is not an executable", source, python),
                  "give the path of a Python that has torch (--python PATH), or run `make venv`");
    return found;
  };
  if (!requested.empty()) return check(requested, "--python");
  if (const char* env = std::getenv("LOOM_PYTHON"); env && *env) return check(env, "$LOOM_PYTHON");
  const fs::path venv = fs::path(LOOM_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (is_executable(venv)) return venv.string();
  std::string python3 = resolve_program("python3");
  if (python3.empty())
    return fail(fmt::format("no Python: no {} and no python3 on PATH", venv.string()),
                "run `make venv`, or pass --python PATH (or set LOOM_PYTHON) to a Python that has torch");
  return python3;
}

// python/ of the source tree, then this build's extension dir (_loom_engine), then the caller's PYTHONPATH.
std::string python_path() {
  std::vector<std::string> entries = {(fs::path(LOOM_SOURCE_DIR) / "python").string()};
  std::error_code ec;
  if (const fs::path ext = executable_dir() / "python"; fs::is_directory(ext, ec)) entries.push_back(ext.string());
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) entries.emplace_back(old);
  return join(entries, ":");
}


int run(const RunArgs& args) {
  std::error_code ec;
  if (!fs::is_regular_file(args.script, ec))
    return report(Error{fmt::format("the script '{}' does not exist", args.script),
                        "give the path of a Python training script: loom run train.py --nproc 2"});
  Expected<std::string> python = find_python(args.python);
  if (!python) return report(python.error());
  std::vector<std::string> argv = {*python, "-m", "torch.distributed.run"};
  std::ranges::copy(torchrun_arguments(args), std::back_inserter(argv));
  const std::string path = python_path();
  if (args.dry_run) {
    fmt::print("PYTHONPATH={} {}\n", path, join(argv, " "));
    return 0;
  }
  ::setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<char*> pointers;
  for (std::string& a : argv) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  std::fflush(stdout);
  ::execv(pointers.front(), pointers.data());
  return report(Error{fmt::format("cannot run '{}': {}", *python, std::strerror(errno)),
                      "pass --python PATH to a working Python that has torch"});
}

}  // namespace

void add_run_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a training script (loom.parallelize) under torchrun: loom run --nproc 4 train.py [args...]");
  cmd->footer(
      "Usage: loom run [OPTIONS] SCRIPT [ARGS...] [-- ARGS...]\n"
      "  --nproc N             processes (ranks) per node (default 1)\n"
      "  --nnodes N|MIN:MAX    nodes (default 1: --standalone on this machine)\n"
      "  --node-rank R         this node's rank, 0 to N-1 (a static rendezvous)\n"
      "  --master-addr HOST    the rank-0 node of a static rendezvous; --master-port PORT its port\n"
      "  --rdzv-backend NAME   a dynamic rendezvous (c10d) at --rdzv-endpoint HOST:PORT, job --rdzv-id ID\n"
      "  --max-restarts N      restarts of the worker group after a failure (torchrun's)\n"
      "  --standalone          one node, its own rendezvous (the default without --nnodes or a rendezvous)\n"
      "  --python PATH         the Python (default: $LOOM_PYTHON, else the repository's .venv, else python3)\n"
      "  --dry-run             print the torchrun command instead of running it\n"
      "Options also take --option=VALUE and may follow the script too; the script's own arguments follow it in\n"
      "order, those named like loom run's options after --. An unknown option before the script is an error.\n"
      "Several nodes: on each, loom run --nnodes 2 --node-rank R --master-addr NODE0 --nproc 8 train.py\n"
      "(or --rdzv-backend c10d --rdzv-endpoint NODE0:29400 --rdzv-id JOB, which numbers the nodes).");
  // Everything after `run` is parse_run_args's: CLI11 would reorder the script's arguments around its own.
  cmd->prefix_command();
  on_selected(cmd, [cmd] {
    Expected<RunArgs> args = parse_run_args(cmd->remaining());
    if (!args) return report(args.error());
    return run(*args);
  });
}

}  // namespace loom::cli