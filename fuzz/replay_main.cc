// A fuzz target's inputs replayed without libFuzzer (the corpus replay `make test` runs, built by the
// project's own compiler): each argument is a file, or a directory whose regular files are read in name
// order, and each file's bytes go to LLVMFuzzerTestOneInput once, as `TARGET_fuzz FILE...` would. A seed or
// a crash once found that crashes the reader again fails the test; the exit status is 0 otherwise.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs_of(const fs::path& arg) {
  if (!fs::is_directory(arg)) return {arg};
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(arg))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::exists(argv[i])) {
      std::fprintf(stderr, "replay: no input '%s'\n", argv[i]);
      return 2;
    }
    for (const fs::path& path : inputs_of(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "replay: cannot read '%s'\n", path.c_str());
        return 2;
      }
      std::fprintf(stderr, "replay: %s\n", path.c_str());
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  std::printf("replayed %zu inputs\n", replayed);
  return replayed > 0 ? 0 : 2;
}
