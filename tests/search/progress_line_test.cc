#include "loom/search/progress_line.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace loom::search {
namespace {

using std::chrono::milliseconds;

// A clock the test steps by hand, and the text written to a temporary file.
struct Harness {
  std::chrono::steady_clock::time_point now{};
  std::FILE* file = std::tmpfile();
  ~Harness() { std::fclose(file); }
  ProgressLine line(bool in_place) {
    return ProgressLine(file, in_place, milliseconds(100), [this] { return now; });
  }
  std::string text() {
    std::fflush(file);
    std::rewind(file);
    std::string out;
    for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) out.push_back(static_cast<char>(c));
    return out;
  }
};

TEST(ProgressLine, FormatsDoneTotalBestAndElapsed) {
  EXPECT_EQ(ProgressLine::format({"pricing", 120, 480, "dp 8 tp 8: 14.2 s"}, 1.34),
            "pricing 120/480 | best dp 8 tp 8: 14.2 s | 1.3 s");
  EXPECT_EQ(ProgressLine::format({"local search", 7, 0, ""}, 0.0), "local search 7 | 0.0 s");
  EXPECT_EQ(ProgressLine::format({"loading", 0, 0, ""}, 2.0), "loading | 2.0 s");
}

TEST(ProgressLine, PrintsTheFirstUpdateThenAtMostOncePerInterval) {
  Harness h;
  ProgressLine line = h.line(false);
  line.update({"pricing", 1, 10, ""});
  h.now += milliseconds(50);
  line.update({"pricing", 2, 10, ""});  // within the interval: held back
  h.now += milliseconds(60);
  line.update({"pricing", 3, 10, "a"});
  EXPECT_EQ(h.text(), "pricing 1/10 | 0.0 s\npricing 3/10 | best a | 0.1 s\n");
}

TEST(ProgressLine, FinishPrintsTheLastReportEvenWithinTheInterval) {
  Harness h;
  ProgressLine line = h.line(false);
  line.update({"pricing", 1, 2, ""});
  line.update({"pricing", 2, 2, "b"});
  line.finish();
  EXPECT_EQ(h.text(), "pricing 1/2 | 0.0 s\npricing 2/2 | best b | 0.0 s\n");
}

TEST(ProgressLine, InPlaceRewritesOneLineAndPadsOverALongerOne) {
  Harness h;
  ProgressLine line = h.line(true);
  line.update({"pricing candidates", 1, 2, ""});
  h.now += milliseconds(200);
  line.update({"done", 0, 0, ""});
  line.finish();
  const std::string first = "pricing candidates 1/2 | 0.0 s";
  const std::string second = "done | 0.2 s";
  EXPECT_EQ(h.text(), "\r" + first + "\r" + second + std::string(first.size() - second.size(), ' ') + "\r" + second +
                          "\n");
}

TEST(ProgressLine, SilentWithoutAnOutputAndFinishWithoutUpdatesPrintsNothing) {
  Harness h;
  ProgressLine quiet(nullptr, false);
  quiet.update({"pricing", 1, 1, ""});
  quiet.finish();
  ProgressLine line = h.line(false);
  line.finish();
  EXPECT_EQ(h.text(), "");
}

}  // namespace
}  // namespace loom::search
