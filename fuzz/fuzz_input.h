// Shared by the fuzz targets (docs/fuzzing.md): the input as the text a reader takes, and the check a
// target makes of a law the reader promises (a round trip). A broken law aborts, which libFuzzer and the
// corpus replay report as a crash with the input that broke it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::fuzz {

inline std::string text_of(const std::uint8_t* data, std::size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

[[noreturn]] inline void law_broken(const char* law) {
  std::fprintf(stderr, "loom fuzz: law broken: %s\n", law);
  std::abort();
}

}  // namespace loom::fuzz

#define LOOM_FUZZ_LAW(condition) \
  do {                           \
    if (!(condition)) ::loom::fuzz::law_broken(#condition); \
  } while (false)
