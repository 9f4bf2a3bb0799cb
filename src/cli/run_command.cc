// `loom run script.py [--nproc N] [args...]`: runs a user's training script (one that calls
// loom.parallelize) on N local processes under torchrun: execs `<python> -m torch.distributed.run
// --standalone --nproc-per-node N script.py args...` with python/ (and this build's extension dir) on
// PYTHONPATH. The Python: --python, else $LOOM_PYTHON, else the repository's .venv, else python3. The exit
// code is torchrun's (non-zero when a rank fails).
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "commands.h"
#include "loom/core/strings.h"

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

struct RunArgs {
  std::string script;
  int nproc = 1;
  std::string python;
  bool dry_run = false;
  std::vector<std::string> script_args;  // after the script: all but loom run's own options (all after --)
};

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

// loom run's arguments: its own options (--nproc N, --python PATH, --dry-run; also --nproc=N) anywhere
// before `--`, the first other word is the script, the rest (in order, and all after `--`) the script's.
Expected<RunArgs> parse_run_args(const std::vector<std::string>& words) {
  RunArgs args;
  bool script_seen = false;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& arg = words[i];
    if (arg == "--") {
      for (std::size_t j = i + 1; j < words.size(); ++j) {
        if (!script_seen) args.script = words[j], script_seen = true;
        else args.script_args.push_back(words[j]);
      }
      break;
    }
    const bool nproc = arg == "--nproc" || arg.starts_with("--nproc=");
    const bool python = arg == "--python" || arg.starts_with("--python=");
    if (arg == "--dry-run") {
      args.dry_run = true;
    } else if (nproc || python) {
      std::string value;
      if (const std::size_t eq = arg.find('='); eq != std::string::npos) value = arg.substr(eq + 1);
      else if (i + 1 < words.size()) value = words[++i];
      else return fail(fmt::format("option {} needs a value", arg), "loom run script.py --nproc 4 [args...]");
      if (python) {
        args.python = value;
        continue;
      }
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > 4096)
        return fail(fmt::format("--nproc: '{}' is not a process count from 1 to 4096", value),
                    "loom run script.py --nproc 4");
      args.nproc = static_cast<int>(n);
    } else if (!script_seen) {
      args.script = arg;
      script_seen = true;
    } else {
      args.script_args.push_back(arg);
    }
  }
  if (!script_seen) return fail("loom run needs a script", "loom run train.py --nproc 4 [args...]");
  return args;
}

int run(const RunArgs& args) {
  std::error_code ec;
  if (!fs::is_regular_file(args.script, ec))
    return report(Error{fmt::format("the script '{}' does not exist", args.script),
                        "give the path of a Python training script: loom run train.py --nproc 2"});
  Expected<std::string> python = find_python(args.python);
  if (!python) return report(python.error());
  std::vector<std::string> argv = {*python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                   std::to_string(args.nproc), args.script};
  argv.insert(argv.end(), args.script_args.begin(), args.script_args.end());
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
      "run", "Run a training script (loom.parallelize) on local processes under torchrun: loom run train.py --nproc 4");
  cmd->footer(
      "Usage: loom run SCRIPT [--nproc N] [--python PATH] [--dry-run] [ARGS...] [-- ARGS...]\n"
      "  --nproc N      processes (ranks) on this machine (default 1)\n"
      "  --python PATH  the Python (default: $LOOM_PYTHON, else the repository's .venv, else python3)\n"
      "  --dry-run      print the command instead of running it\n"
      "Loom's options may stand before or after the script; the script's own arguments follow it in order,\n"
      "those named like loom run's options after --.");
  // Everything after `run` is parse_run_args's: CLI11 would reorder the script's arguments around its own.
  cmd->prefix_command();
  on_selected(cmd, [cmd] {
    Expected<RunArgs> args = parse_run_args(cmd->remaining());
    if (!args) return report(args.error());
    return run(*args);
  });
}

}  // namespace loom::cli
