// The profile database's file: a round trip, byte-identical saves, and errors naming file and entry.
#include "loom/cost/profile_db.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace loom::cost {
namespace {

namespace fs = std::filesystem;

class ProfileDbFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loom_profile_db_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name)) << text;
    return path(name);
  }
  // The error loading `text` gives; fails the test when it loads.
  std::string error_of(const std::string& text) const {
    const std::string file = write("bad.json", text);
    auto db = ProfileDb::load(file);
    EXPECT_FALSE(db) << text;
    if (db) return {};
    EXPECT_NE(db.error().message.find(file), std::string::npos) << db.error().message;
    return db.error().to_string();
  }
  fs::path dir_;
};

ProfileKey key(std::string op, std::int64_t m) {
  return {.op = std::move(op), .shapes = {ir::Shape{m, 8}, ir::Shape{8, 4}}, .dtype = ir::DType::bf16, .device = "A100"};
}

TEST_F(ProfileDbFile, RoundTripsAndSavesDeterministically) {
  ProfileDb db;
  db.set(key("matmul", 16), 2.5e-6);
  db.set(key("matmul/backward", 16), 5e-6);
  db.set(key("matmul", 32), 4e-6);
  db.set(key("matmul", 32), 4.5e-6);  // replaces
  EXPECT_EQ(db.size(), 3u);
  ASSERT_TRUE(db.save(path("p.json")));
  auto loaded = ProfileDb::load(path("p.json"));
  ASSERT_TRUE(loaded) << loaded.error().to_string();
  EXPECT_EQ(loaded->entries(), db.entries());
  EXPECT_EQ(loaded->find(key("matmul", 32)), 4.5e-6);
  EXPECT_EQ(loaded->find(key("matmul", 64)), std::nullopt);
  ProfileKey f32 = key("matmul", 16);
  f32.dtype = ir::DType::f32;
  EXPECT_EQ(loaded->find(f32), std::nullopt);
  EXPECT_EQ(loaded->to_json(), db.to_json());
  for (const auto& entry : fs::directory_iterator(fs::path(path("p.json")).parent_path()))
    EXPECT_FALSE(entry.path().filename().string().starts_with(".loom-staging")) << "a staging directory was left";
}

TEST_F(ProfileDbFile, AcceptsDtypeAliases) {
  const std::string file = write("a.json", R"({"version": 1, "entries": [
    {"op": "matmul", "shapes": [[16, 8], [8, 4]], "dtype": "bfloat16", "device": "A100", "seconds": 2e-6}]})");
  auto db = ProfileDb::load(file);
  ASSERT_TRUE(db) << db.error().to_string();
  EXPECT_EQ(db->find(key("matmul", 16)), 2e-6);
}

TEST_F(ProfileDbFile, BadFilesNameTheFileAndEntry) {
  EXPECT_NE(error_of("{not json").find(": line 1 column 3: malformed JSON: syntax error"), std::string::npos);
  EXPECT_NE(error_of("[]").find("not a profile database"), std::string::npos);
  EXPECT_NE(error_of(R"({"version": 7, "entries": []})").find("unsupported profile version 7"), std::string::npos);
  const std::string ok = R"({"op": "add", "shapes": [[4]], "dtype": "f32", "device": "A100", "seconds": 1e-6})";
  const auto with_second = [&](const std::string& entry) {
    return R"({"version": 1, "entries": [)" + ok + ", " + entry + "]}";
  };
  std::string e = error_of(with_second(R"({"op": "add", "shapes": [[4]], "dtype": "f32", "device": "A100"})"));
  EXPECT_NE(e.find("entry 1: \"seconds\" must be a number"), std::string::npos) << e;
  e = error_of(with_second(R"({"op": "add", "shapes": [[4]], "dtype": "f32", "device": "A100", "seconds": -1})"));
  EXPECT_NE(e.find("entry 1: \"seconds\" must be positive"), std::string::npos) << e;
  e = error_of(with_second(R"({"op": "add", "shapes": [[4]], "dtype": "f33", "device": "A100", "seconds": 1})"));
  EXPECT_NE(e.find("entry 1"), std::string::npos) << e;
  EXPECT_NE(e.find("f33"), std::string::npos) << e;
  e = error_of(with_second(R"({"op": "add", "shapes": [[4, -2]], "dtype": "f32", "device": "A100", "seconds": 1})"));
  EXPECT_NE(e.find("entry 1, shape 0: size -2"), std::string::npos) << e;
  e = error_of(with_second(R"({"shapes": [[4]], "dtype": "f32", "device": "A100", "seconds": 1})"));
  EXPECT_NE(e.find("entry 1: missing \"op\""), std::string::npos) << e;
  e = error_of(with_second(R"({"op": "add", "shapes": [[4]], "dtype": "fp32", "device": "A100", "seconds": 2e-6})"));
  EXPECT_NE(e.find("entry 1 repeats the key of entry 0"), std::string::npos) << e;
  auto missing = ProfileDb::load(path("nope.json"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("nope.json: cannot read the profile database: no such file"), std::string::npos);
}

// Found by fuzz/profile_db_fuzz.cc: a number beyond double made json throw out_of_range, which the reader did
// not catch (`--profile` aborted, exit 134).
TEST(ProfileDb, ANumberBeyondDoubleIsMalformedJsonNamingTheFile) {
  auto db = ProfileDb::parse(R"({"version": 11e308, "entries": []})", "p.json");
  ASSERT_FALSE(db);
  EXPECT_EQ(db.error().message, "p.json: malformed JSON: number overflow parsing '11e308'");
}

TEST_F(ProfileDbFile, SaveIntoAMissingDirectoryFailsCleanly) {
  ProfileDb db;
  db.set(key("matmul", 16), 1e-6);
  auto saved = db.save(path("no/such/dir/p.json"));
  ASSERT_FALSE(saved);
  EXPECT_NE(saved.error().message.find("p.json"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("no")));
}

}  // namespace
}  // namespace loom::cost
