// Running the Python timer (python/loom_profile) from `loom profile`: where it lives, which interpreter
// runs it, and the child process itself. The timer reads a request file and writes a results file
// (include/loom/cost/profile_requests.h); nothing else passes between them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::cli {

struct TimerSetup {
  std::filesystem::path package_root;  // the directory holding loom_profile/ (goes on PYTHONPATH)
  std::string python;                  // interpreter path
};

// Finds python/loom_profile above the loom executable (a build directory sits inside the repository)
// and the interpreter: `python` when given, else the repository's .venv/bin/python. Errors say that
// `make setup` creates .venv.
Expected<TimerSetup> find_timer(const std::string& python);

// Runs `python -m <module> args...` (the timer, loom_profile, by default) with the package on PYTHONPATH;
// the module's own output goes to this process's stderr. Errors: the interpreter cannot start, torch is
// missing (exit 3), any other failure.
Expected<void> run_timer(const TimerSetup& setup, const std::vector<std::string>& args,
                         const std::string& module = "loom_profile");

// A fresh private directory for the request and results files, removed when the guard goes.
class TempDir {
 public:
  static Expected<TempDir> make();
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  explicit TempDir(std::filesystem::path path) : path_(std::move(path)) {}
  std::filesystem::path path_;
};

}  // namespace loom::cli
