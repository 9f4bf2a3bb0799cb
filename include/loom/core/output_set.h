// Writing the files of one command as one set, all or none (`loom plan --out` with --emit, `loom models
// --write-files`, and every single file through write_file_atomically):
//   1. lock each target directory (flock, exclusive; directories in path order, so two writers never
//      deadlock): a second writer waits for the first to finish, then writes its whole set;
//   2. refuse a target that exists and is not a regular file (a symlink, a FIFO, a device, a directory),
//      naming it, before anything is written;
//   3. write every file into a staging directory inside its target directory (same file system, so the
//      renames below are atomic), each fsynced;
//   4. only when all are written, rename each into place in the order added (so manifest.json, added last,
//      appears after the rank programs it lists) and fsync the directories.
// A failure in 1-3 leaves the previous files untouched and no staging directory behind. With SIGXFSZ
// ignored (the CLI's main does it; Python does it by default) a file-size limit is an error naming the file.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom {

// How long a writer waits for another's lock on a directory before giving up with an error naming it.
inline constexpr std::chrono::milliseconds kOutputLockWait{60'000};

class OutputSet {
 public:
  // DIR/NAME gets `text`; `what` names it in errors ("plan.json", "the model file"). DIR is created when
  // missing. NAME is a plain file name (no '/').
  void add(std::string dir, std::string name, std::string text, std::string what);

  // Writes the set; returns the paths written (DIR/NAME), in the order added.
  Expected<std::vector<std::string>> commit(std::chrono::milliseconds lock_wait = kOutputLockWait) const;

  // Once the set is in place, files in DIR named PREFIX<digits>SUFFIX that it did not write are removed
  // (rank_7.py of an earlier 8-rank emit after a 4-rank one), so the directory holds one set, not two mixed.
  void remove_stale(std::string dir, std::string prefix, std::string suffix);

  bool empty() const { return files_.empty(); }

 private:
  struct File {
    std::string dir, name, text, what;
  };
  struct Family {
    std::string dir, prefix, suffix;
  };
  void remove_stale_files() const;
  std::vector<File> files_;
  std::vector<Family> families_;
};

// The name prefix of staging directories (".loom-staging-<pid>"); one found while holding the directory's
// lock is a killed writer's leftover and is removed.
inline constexpr std::string_view kStagingPrefix = ".loom-staging-";

}  // namespace loom
