// Progress: the live bar redraws in place on a terminal; without one, only plain logged lines appear.
#include "examples/internal/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace tinyddp::examples {
namespace {

// What `run` printed through a Progress writing to a temporary file.
template <typename Fn>
std::string Capture(bool interactive, Fn run, PlainLineLimits limits = {0, 0}) {
  std::FILE* f = std::tmpfile();
  {
    Progress p(interactive, f, limits);
    run(p);
  }
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

TEST(Progress, FormatsDurationsLikeAClock) {
  EXPECT_EQ(FormatDuration(9.4), "0:09");
  EXPECT_EQ(FormatDuration(754), "12:34");
  EXPECT_EQ(FormatDuration(3723), "1:02:03");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatDuration(std::nan("")), "?");
}

TEST(Progress, BarFillsInProportion) {
  EXPECT_EQ(RenderBar(0, 469, 10), "[----------]");
  EXPECT_EQ(RenderBar(234, 469, 10), "[####------]");
  EXPECT_EQ(RenderBar(469, 469, 10), "[##########]");
  EXPECT_EQ(RenderBar(7, 0, 4), "[----]");
}

TEST(Progress, PlainOutputHasOneLinePerLoggedStepAndNoCarriageReturns) {
  const std::string out = Capture(false, [](Progress& p) {
    p.BeginEpoch(0, 3, 469, 0, 128);
    for (int b = 1; b <= 120; ++b) p.Update(b, std::nan(""));
    p.LogStep(50, 0.8123, 0.08);
    p.LogStep(100, 0.6012, 0.07);
    p.EndEpoch();
    p.Print("epoch 1/3: done");
  });
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1/3  step 50/469  loss 0.8123  lr 0.08"), std::string::npos) << out;
  EXPECT_NE(out.find("step 100/469  loss 0.6012"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 1/3: done\n"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
}

TEST(Progress, PlainLinesComeAtMostOncePerTenthOfAnEpoch) {
  const std::string out = Capture(
      false,
      [](Progress& p) {
        p.BeginEpoch(0, 1, 469, 0, 128);
        for (int b = 5; b <= 465; b += 5) p.LogStep(b, 0.5, 0.01);  // --log_every=5: 93 logged steps
      },
      {/*min_seconds=*/0, /*min_epoch_fraction=*/0.1});
  // A line once 46.9 more batches have passed: at 50, 100, ..., 450.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 9) << out;
  EXPECT_NE(out.find("step 50/469"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 45/469"), std::string::npos) << out;
  EXPECT_NE(out.find("step 450/469"), std::string::npos) << out;
}

TEST(Progress, PlainLinesWaitForTheirMinimumInterval) {
  // Far more than this test's run time: no logged step may print, however far the epoch advances.
  const std::string out = Capture(
      false,
      [](Progress& p) {
        p.BeginEpoch(0, 1, 100, 0, 64);
        for (int b = 10; b <= 100; b += 10) p.LogStep(b, 0.5, 0.01);
        p.Print("epoch 1/1: done");
      },
      {/*min_seconds=*/3600, /*min_epoch_fraction=*/0});
  EXPECT_EQ(out, "epoch 1/1: done\n");
}

TEST(Progress, TerminalOutputRedrawsOneLineAndKeepsMessagesAboveIt) {
  const std::string out = Capture(true, [](Progress& p) {
    p.BeginEpoch(1, 2, 10, 4, 64);  // resumed: 4 of 10 batches were done before
    p.LogStep(5, 0.5, 0.01);
    p.Update(5, std::nan(""));
    p.Print("a message");
    p.Update(10, std::nan(""));
    p.EndEpoch();
  });
  EXPECT_NE(out.find("\r\033[Kepoch 2/2 [#########"), std::string::npos) << out;  // 4/10 at the start
  EXPECT_NE(out.find("a message\n"), std::string::npos);
  EXPECT_NE(out.find("10/10  loss 0.5000"), std::string::npos) << out;  // the last logged loss stays shown
  EXPECT_EQ(out.back(), '\n');
}

}  // namespace
}  // namespace tinyddp::examples
