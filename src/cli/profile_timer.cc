#include "profile_timer.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

extern char** environ;

namespace loom::cli {
namespace {

namespace fs = std::filesystem;

// The timer's exit code when `import torch` fails (python/loom_profile/__main__.py).
constexpr int kNoTorchExit = 3;
constexpr std::string_view kSetupHint = "`make setup` creates .venv with torch; or pass --python PATH to a Python that has torch";

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

}  // namespace

Expected<TimerSetup> find_timer(const std::string& python) {
  fs::path root;
  for (fs::path dir = executable_dir(); !dir.empty(); dir = dir.parent_path()) {
    std::error_code ec;
    if (fs::is_regular_file(dir / "python" / "loom_profile" / "__main__.py", ec)) {
      root = dir;
      break;
    }
    if (dir == dir.root_path()) break;
  }
  if (root.empty())
    return fail("cannot find the timer python/loom_profile above the loom executable",
                "run the loom built inside the repository (its build directory sits beside python/)");
  TimerSetup setup{.package_root = root / "python", .python = python};
  if (setup.python.empty()) {
    const fs::path venv_python = root / ".venv" / "bin" / "python";
    std::error_code ec;
    if (!fs::exists(venv_python, ec))
      return fail(fmt::format("no Python environment at {}", (root / ".venv").string()), std::string(kSetupHint));
    setup.python = venv_python.string();
  }
  return setup;
}

Expected<void> run_timer(const TimerSetup& setup, const std::vector<std::string>& args, const std::string& module) {
  std::vector<std::string> argv = {setup.python, "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> argv_ptrs;
  for (std::string& a : argv) argv_ptrs.push_back(a.data());
  argv_ptrs.push_back(nullptr);

  // The environment as it is, with the package first on PYTHONPATH.
  std::vector<std::string> env;
  std::string python_path = "PYTHONPATH=" + setup.package_root.string();
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PYTHONPATH=", 11) == 0) python_path += std::string(":") + (*e + 11);
    else env.emplace_back(*e);
  }
  env.push_back(python_path);
  std::vector<char*> env_ptrs;
  for (std::string& e : env) env_ptrs.push_back(e.data());
  env_ptrs.push_back(nullptr);

  // stdout of the child joins stderr: loom's stdout carries only its own report.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, argv_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0)
    return fail(fmt::format("cannot run the Python interpreter '{}': {}", setup.python, std::strerror(spawned)),
                std::string(kSetupHint));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return fail(fmt::format("waiting for the timer failed: {}", std::strerror(errno)));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  if (WIFEXITED(status) && WEXITSTATUS(status) == kNoTorchExit)
    return fail(fmt::format("the Python at '{}' has no torch", setup.python), std::string(kSetupHint));
  if (WIFEXITED(status))
    return fail(fmt::format("{} -m {} failed with exit code {}", setup.python, module, WEXITSTATUS(status)),
                "its messages are above");
  return fail(fmt::format("{} -m {} was killed by signal {}", setup.python, module,
                          WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

Expected<TempDir> TempDir::make() {
  std::error_code ec;
  fs::path base = fs::temp_directory_path(ec);
  if (ec) base = "/tmp";
  std::string pattern = (base / "loom-profile-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    return fail(fmt::format("cannot create a temporary directory in {}: {}", base.string(), std::strerror(errno)),
                "set TMPDIR to a writable directory");
  return TempDir(fs::path(pattern));
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace loom::cli
