#include "loom/core/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace loom {
namespace {

namespace fs = std::filesystem;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("loom-input-file-{}-{}", ::getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(InputFileTest, ReadsARegularFile) {
  std::ofstream(path("g.json")) << "{\"ops\": []}";
  Expected<std::string> text = read_input_file(path("g.json"), "graph file", "hint");
  ASSERT_TRUE(text) << text.error().to_string();
  EXPECT_EQ(*text, "{\"ops\": []}");
}

// /dev/zero never ends: refused at once, naming it, without reading a byte.
TEST_F(InputFileTest, RefusesACharacterDevice) {
  Expected<std::string> text = read_input_file("/dev/zero", "profile database", "hint");
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().message,
            "/dev/zero: cannot read the profile database: it is a character device, not a regular file");
}

// A FIFO with no writer would block a plain open forever.
TEST_F(InputFileTest, RefusesAFifoWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  Expected<std::string> text = read_input_file(path("pipe"), "graph file", "hint");
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error().message,
            path("pipe") + ": cannot read the graph file: it is a FIFO (named pipe), not a regular file");
}

TEST_F(InputFileTest, RefusesADirectoryAndAMissingFile) {
  EXPECT_EQ(read_input_file(dir_.string(), "model file", "h").error().message,
            dir_.string() + ": cannot read the model file: it is a directory, not a regular file");
  EXPECT_EQ(read_input_file(path("absent"), "model file", "h").error().message,
            path("absent") + ": cannot read the model file: no such file");
}

TEST_F(InputFileTest, RefusesAFileOverTheLimit) {
  std::ofstream(path("big")) << std::string(2000, 'x');
  Expected<std::string> text = read_input_file(path("big"), "cluster file", "h", 1024);
  ASSERT_FALSE(text);
  EXPECT_NE(text.error().message.find("(2000 bytes), more than the 1.00 KiB a cluster file may have"),
            std::string::npos)
      << text.error().message;
  EXPECT_TRUE(read_input_file(path("big"), "cluster file", "h", 2000));
}

}  // namespace
}  // namespace loom
