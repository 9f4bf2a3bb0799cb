#include "loom/core/output_set.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "loom/core/strings.h"
#include "posix_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using posix::Descriptor;
using posix::kind_of;

// One target directory of the set: its lock, its staging directory and the files going into it.
struct Target {
  std::string dir;  // as the caller spelt it (the first spelling, when several name one directory)
  Descriptor handle;
  fs::path staging;
  bool staged = false;
};

std::string hint_for(int error, std::size_t bytes) {
  if (error == EFBIG)
    return fmt::format("the file needs {} bytes, more than this process's file-size limit (ulimit -f) allows", bytes);
  if (error == ENOSPC || error == EDQUOT) return "free disk space (or raise the quota) and run it again";
  if (error == EACCES || error == EPERM || error == EROFS) return "give a directory you can write to";
  return {};
}

Expected<Descriptor> open_and_lock(const std::string& dir, std::chrono::milliseconds wait) {
  Descriptor handle(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (handle.fd < 0) return fail(fmt::format("{}: cannot open the output directory ({})", dir, std::strerror(errno)));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (::flock(handle.fd, LOCK_EX | LOCK_NB) != 0) {
    // A file system without locks (some network mounts): write unlocked rather than not at all.
    if (errno == ENOLCK || errno == EOPNOTSUPP || errno == ENOSYS) break;
    if (errno != EWOULDBLOCK && errno != EINTR)
      return fail(fmt::format("{}: cannot lock the output directory ({})", dir, std::strerror(errno)));
    if (std::chrono::steady_clock::now() >= deadline)
      return fail(fmt::format("{}: another command has been writing its files into this directory for over {} s",
                              dir, std::chrono::duration_cast<std::chrono::seconds>(wait).count()),
                  "wait for it to finish (or stop it), or give another output directory");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return handle;
}

// A staging directory found while holding the lock belongs to a writer that was killed: every live writer
// holds the lock while its staging directory exists.
void remove_leftover_staging(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with(kStagingPrefix)) fs::remove_all(entry.path(), ec);
}

// The existing file at `path` may be replaced only when it is a regular file (never followed: a symlink is refused).
Expected<void> check_replaceable(const std::string& path, std::string_view what) {
  struct stat status{};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) return {};
    return fail(fmt::format("{}: cannot inspect the target of {} ({})", path, what, std::strerror(errno)));
  }
  if (S_ISREG(status.st_mode)) return {};
  std::string kind(kind_of(status.st_mode));
  if (S_ISLNK(status.st_mode)) {
    std::error_code ec;
    const fs::path to = fs::read_symlink(path, ec);
    if (!ec) kind += fmt::format(" to '{}'", to.string());
  }
  return fail(fmt::format("{}: refusing to write {} over {}; output files must be regular files", path, what, kind),
              "remove it or give another output directory");
}

// 0, or the errno of the failed write.
int write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno;
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
  return 0;
}

// Writes and fsyncs one staged file; the error names the final path.
Expected<void> stage_file(const fs::path& staged, const std::string& final_path, std::string_view text,
                          std::string_view what) {
  const auto failed = [&](std::string_view step, int error) {
    return fail(fmt::format("{}: {} {} failed: {}", final_path, step, what, std::strerror(error)),
                hint_for(error, text.size()));
  };
  Descriptor file(::open(staged.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (file.fd < 0) return failed("creating", errno);
  if (const int error = write_all(file.fd, text); error != 0) return failed("writing", error);
  if (::fsync(file.fd) != 0) return failed("syncing", errno);
  const int fd = std::exchange(file.fd, -1);
  if (::close(fd) != 0) return failed("closing", errno);
  return {};
}

std::atomic<int> staging_serial{0};

}  // namespace

void OutputSet::add(std::string dir, std::string name, std::string text, std::string what) {
  files_.push_back(File{dir.empty() ? "." : std::move(dir), std::move(name), std::move(text), std::move(what)});
}

void OutputSet::remove_stale(std::string dir, std::string prefix, std::string suffix) {
  families_.push_back(Family{dir.empty() ? "." : std::move(dir), std::move(prefix), std::move(suffix)});
}

void OutputSet::remove_stale_files() const {
  for (const Family& family : families_) {
    std::error_code ec;
    const fs::path dir = fs::canonical(family.dir, ec);
    if (ec) continue;
    std::set<std::string> written;
    for (const File& file : files_)
      if (fs::equivalent(file.dir, dir, ec)) written.insert(file.name);
    if (written.empty()) continue;  // not a directory of this set: not locked by this writer
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (written.contains(name) || !entry.is_regular_file(ec) || !name.starts_with(family.prefix) ||
          !name.ends_with(family.suffix) || name.size() <= family.prefix.size() + family.suffix.size())
        continue;
      const std::string_view middle =
          std::string_view(name).substr(family.prefix.size(), name.size() - family.prefix.size() - family.suffix.size());
      if (std::ranges::all_of(middle, [](char c) { return c >= '0' && c <= '9'; })) fs::remove(entry.path(), ec);
    }
  }
}

Expected<std::vector<std::string>> OutputSet::commit(std::chrono::milliseconds lock_wait) const {
  // 1-2. The directories, created when missing, each once (by its canonical path, in that order).
  std::map<std::string, Target> targets;
  std::vector<std::string> target_of;  // per file, the key of its directory
  for (const File& file : files_) {
    std::error_code ec;
    fs::create_directories(file.dir, ec);
    if (ec) return fail(fmt::format("{}: cannot create the output directory: {}", file.dir, ec.message()),
                        "give a directory path you can write to");
    const fs::path canonical = fs::canonical(file.dir, ec);
    if (ec) return fail(fmt::format("{}: cannot resolve the output directory: {}", file.dir, ec.message()));
    target_of.push_back(canonical.string());
    targets.try_emplace(canonical.string(), Target{.dir = file.dir});
  }
  for (auto& [key, target] : targets) {
    LOOM_ASSIGN_OR_RETURN(Descriptor handle, open_and_lock(target.dir, lock_wait));
    target.handle = std::move(handle);
    remove_leftover_staging(target.dir);
  }
  std::vector<std::string> paths;
  for (const File& file : files_) {
    paths.push_back((fs::path(file.dir) / file.name).string());
    LOOM_RETURN_IF_ERROR(check_replaceable(paths.back(), file.what));
  }

  // 3. Stage every file; on any failure remove every staging directory.
  const auto discard = [&] {
    std::error_code ec;
    for (auto& [key, target] : targets)
      if (target.staged) fs::remove_all(target.staging, ec);
  };
  for (auto& [key, target] : targets) {
    target.staging = fs::path(key) / fmt::format("{}{}-{}", kStagingPrefix, ::getpid(), staging_serial++);
    if (::mkdir(target.staging.c_str(), 0700) != 0) {
      const int error = errno;
      discard();
      return fail(fmt::format("{}: cannot create a staging directory in the output directory ({})", target.dir,
                              std::strerror(error)),
                  hint_for(error, 0));
    }
    target.staged = true;
  }
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const Target& target = targets.at(target_of[i]);
    if (Expected<void> staged = stage_file(target.staging / files_[i].name, paths[i], files_[i].text, files_[i].what);
        !staged) {
      discard();
      return std::unexpected(staged.error());
    }
  }

  // 4. Into place, in order. With the lock held and every target checked, a rename fails only when the
  // directory is changed by something that ignores the lock.
  for (std::size_t i = 0; i < files_.size(); ++i) {
    const Target& target = targets.at(target_of[i]);
    if (std::rename((target.staging / files_[i].name).c_str(), (fs::path(target_of[i]) / files_[i].name).c_str()) != 0) {
      const int error = errno;
      discard();
      return fail(fmt::format("{}: cannot move {} into place ({})", paths[i], files_[i].what, std::strerror(error)));
    }
  }
  remove_stale_files();  // still under the locks
  for (auto& [key, target] : targets) {
    ::rmdir(target.staging.c_str());
    target.staged = false;
    if (::fsync(target.handle.fd) != 0)
      return fail(fmt::format("{}: syncing the output directory failed ({})", target.dir, std::strerror(errno)));
  }
  return paths;
}

}  // namespace loom
