#include "loom/core/output_set.h"

#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "loom/core/atomic_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class OutputSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("loom-output-set-{}-{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& p) {
    std::ifstream in(p);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // Every entry of the directory, sorted: a staging directory left behind shows up here.
  std::vector<std::string> entries(const fs::path& d) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    std::ranges::sort(names);
    return names;
  }
  static OutputSet set_of(const std::string& dir, const std::string& text) {
    OutputSet set;
    set.add(dir, "a.json", text, "a.json");
    set.add(dir, "b.json", text, "b.json");
    return set;
  }
  fs::path dir_;
};

TEST_F(OutputSetTest, CommitWritesEveryFileInOrderAndLeavesNoStaging) {
  Expected<std::vector<std::string>> paths = set_of(path("out"), "one").commit();
  ASSERT_TRUE(paths) << paths.error().to_string();
  EXPECT_EQ(*paths, (std::vector<std::string>{path("out/a.json"), path("out/b.json")}));
  EXPECT_EQ(read(path("out/a.json")), "one");
  EXPECT_EQ(entries(dir_ / "out"), (std::vector<std::string>{"a.json", "b.json"}));
}

TEST_F(OutputSetTest, StaleFilesOfAFamilyAreRemovedOnceTheSetIsInPlace) {
  fs::create_directories(dir_ / "out");
  for (const char* name : {"rank_0.py", "rank_1.py", "rank_2.py", "rank_x.py", "rank_3.pyc", "other.py"})
    std::ofstream(path(std::string("out/") + name)) << "old";
  fs::create_directories(dir_ / "out/rank_9.py");  // not a regular file: left alone
  OutputSet set;
  set.add(path("out"), "rank_0.py", "new", "rank_0.py");
  set.remove_stale(path("out"), "rank_", ".py");
  set.remove_stale(path("elsewhere"), "rank_", ".py");  // no file of the set there: untouched, not created
  ASSERT_TRUE(set.commit());
  EXPECT_EQ(entries(dir_ / "out"),
            (std::vector<std::string>{"other.py", "rank_0.py", "rank_3.pyc", "rank_9.py", "rank_x.py"}));
  EXPECT_EQ(read(path("out/rank_0.py")), "new");
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere"));
}

TEST_F(OutputSetTest, AFailedSetRemovesNothing) {
  fs::create_directories(dir_ / "out");
  std::ofstream(path("out/rank_5.py")) << "old";
  fs::create_directories(dir_ / "out/manifest.json");  // refused target: the set fails before writing
  OutputSet set;
  set.add(path("out"), "rank_0.py", "new", "rank_0.py");
  set.add(path("out"), "manifest.json", "{}", "manifest.json");
  set.remove_stale(path("out"), "rank_", ".py");
  EXPECT_FALSE(set.commit());
  EXPECT_EQ(read(path("out/rank_5.py")), "old");
}

TEST_F(OutputSetTest, TwoDirectoriesAreOneSetAndOneDirectoryIsLockedOnce) {
  OutputSet set = set_of(path("x"), "1");
  set.add(path("y"), "m.json", "2", "m.json");
  set.add(path("x/../x"), "c.json", "3", "c.json");  // the same directory spelt differently: one lock, not a deadlock
  ASSERT_TRUE(set.commit(std::chrono::milliseconds(0)));
  EXPECT_EQ(entries(dir_ / "x"), (std::vector<std::string>{"a.json", "b.json", "c.json"}));
  EXPECT_EQ(read(path("y/m.json")), "2");
}

// A target that is not a regular file is refused, naming it, before any file of the set is replaced.
TEST_F(OutputSetTest, RefusesASymlinkOrAFifoTargetAndKeepsThePreviousSet) {
  ASSERT_TRUE(set_of(path("out"), "old").commit());
  fs::remove(path("out/b.json"));
  fs::create_symlink(path("elsewhere"), path("out/b.json"));
  Expected<std::vector<std::string>> linked = set_of(path("out"), "new").commit();
  ASSERT_FALSE(linked);
  EXPECT_NE(linked.error().message.find(path("out/b.json") + ": refusing to write b.json over a symbolic link"),
            std::string::npos)
      << linked.error().message;
  EXPECT_FALSE(fs::exists(path("elsewhere")));
  fs::remove(path("out/b.json"));
  ASSERT_EQ(::mkfifo(path("out/b.json").c_str(), 0600), 0);
  Expected<std::vector<std::string>> fifo = set_of(path("out"), "new").commit();
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().message.find("over a FIFO"), std::string::npos) << fifo.error().message;
  EXPECT_EQ(read(path("out/a.json")), "old");
  EXPECT_EQ(entries(dir_ / "out"), (std::vector<std::string>{"a.json", "b.json"}));
}

TEST_F(OutputSetTest, ADirectoryInPlaceOfAFileIsRefusedBeforeAnythingIsWritten) {
  ASSERT_TRUE(set_of(path("out"), "old").commit());
  fs::remove(path("out/b.json"));
  fs::create_directory(path("out/b.json"));
  Expected<std::vector<std::string>> result = set_of(path("out"), "new").commit();
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("over a directory"), std::string::npos);
  EXPECT_EQ(read(path("out/a.json")), "old");  // a.json comes first in the set and is still the old one
}

// A writer that finds the directory locked waits; past the wait it fails naming the directory.
TEST_F(OutputSetTest, ALockedDirectoryMakesTheSecondWriterFailAfterItsWait) {
  fs::create_directories(path("out"));
  const int held = ::open(path("out").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  Expected<std::vector<std::string>> result = set_of(path("out"), "new").commit(std::chrono::milliseconds(50));
  ::close(held);
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find(path("out") + ": another command has been writing"), std::string::npos)
      << result.error().message;
  EXPECT_TRUE(entries(dir_ / "out").empty());
  EXPECT_TRUE(set_of(path("out"), "new").commit(std::chrono::milliseconds(0)));  // the lock is free again
}

// Two writers racing on one directory: every round ends with one writer's whole set, never a mix.
TEST_F(OutputSetTest, ConcurrentWritersNeverLeaveAMixedSet) {
  for (int round = 0; round < 40; ++round) {
    std::thread first([&] { EXPECT_TRUE(set_of(path("out"), "first").commit()); });
    std::thread second([&] { EXPECT_TRUE(set_of(path("out"), "second").commit()); });
    first.join();
    second.join();
    ASSERT_EQ(read(path("out/a.json")), read(path("out/b.json"))) << "round " << round;
  }
  EXPECT_EQ(entries(dir_ / "out"), (std::vector<std::string>{"a.json", "b.json"}));
}

TEST_F(OutputSetTest, AKilledWritersStagingDirectoryIsRemovedByTheNextWriter) {
  fs::create_directories(path("out/.loom-staging-999999-0"));
  std::ofstream(path("out/.loom-staging-999999-0/a.json")) << "half";
  ASSERT_TRUE(set_of(path("out"), "new").commit());
  EXPECT_EQ(entries(dir_ / "out"), (std::vector<std::string>{"a.json", "b.json"}));
}

// With SIGXFSZ ignored, a file-size limit is an error naming the file, the previous set stays, and no
// staged file is left. Run in a child so the limit does not reach the other tests.
TEST_F(OutputSetTest, AFileSizeLimitIsAnErrorNamingTheFile) {
  ASSERT_TRUE(set_of(path("out"), "old").commit());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    OutputSet set;
    set.add(path("out"), "a.json", "small", "a.json");
    set.add(path("out"), "b.json", std::string(64 << 10, 'x'), "b.json");
    Expected<std::vector<std::string>> result = set.commit();
    const bool named = !result && result.error().message == path("out/b.json") + ": writing b.json failed: File too large";
    ::_exit(named ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the error did not name out/b.json and EFBIG";
  EXPECT_EQ(read(path("out/a.json")), "old");
  EXPECT_EQ(entries(dir_ / "out"), (std::vector<std::string>{"a.json", "b.json"}));
}

TEST_F(OutputSetTest, WriteFileAtomicallyRefusesADeviceNodeTarget) {
  // /dev/null is a character device in a directory the test may not write: the refusal comes first.
  Expected<void> result = write_file_atomically("/dev/null", "text", "the graph");
  ASSERT_FALSE(result);
  EXPECT_NE(result.error().message.find("/dev/null: refusing to write the graph over a character device"),
            std::string::npos)
      << result.error().message;
}

}  // namespace
}  // namespace loom
