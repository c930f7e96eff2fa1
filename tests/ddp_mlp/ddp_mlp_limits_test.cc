// //examples:ddp_mlp against what the machine cannot give, run as a user runs it (the real binary, its 2
// Gloo ranks, real files, a real address-space limit, real full and read-only file systems):
//
// the claims: a damaged checkpoint of a later step never makes --keep_checkpoints delete the last good
// one, so a run that exits 0 leaves something to --resume from; a FIFO given as trainer_state.json or as
// --init_from is refused at once instead of blocking the run; a model too large for this machine is
// refused within seconds, before any worker allocates it, with the figures and without a signal; and a
// checkpoint folder on a full disk or a read-only file system ends the run with the permanent-failure
// status (73), which a launcher does not restart; a gzip bomb as a Fashion-MNIST file is refused with the
// size its header promises, within an address space far smaller than the bomb.
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "dist/testing/process_test_util.h"
#include "gtest/gtest.h"
#include "tests/ddp_mlp/run_ddp_mlp.h"
#include "tests/ddp_mlp/small_disk.h"

namespace tinyddp::testing {
namespace {

namespace fs = std::filesystem;
using dist::testing::ReadFile;

constexpr int kPermanentFailureExitCode = 73;  // examples/internal/durable_file.h

// The tiny job: 3 epochs of 19 steps, checkpoints every 10 steps and at each epoch's end.
std::vector<std::string> CheckpointedJob(const std::string& checkpoint_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--epochs=3", "--seed=5", "--checkpoint_dir=" + checkpoint_dir,
                                    "--checkpoint_every=10", "--timeout=20s"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return TinyJob("gloo", flags);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(DdpMlpLimits, ADamagedLaterCheckpointNeverMakesRetentionDeleteTheLastGoodOne) {
  const std::string dir = FreshDir("retention");
  // Steps 38 and 40 kept; then step 40's weights are damaged (a bit flip on disk).
  const RunResult a = RunDdpMlp(CheckpointedJob(dir, {"--max_steps=40", "--keep_checkpoints=2"}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const std::string weights = dir + "/step-00000040/model.safetensors";
  std::string bytes = ReadFile(weights);
  ASSERT_GT(bytes.size(), 1000u);
  bytes[bytes.size() - 7] ^= 0x20;
  dist::testing::WriteFile(weights, bytes);

  // Resumed from 38 (40 is refused), one step, a checkpoint at 39 with --keep_checkpoints=1: by step
  // number 40 is the newest, but it does not verify, so 39 must stay.
  const RunResult b = RunDdpMlp(CheckpointedJob(dir, {"--resume", "--max_steps=39", "--keep_checkpoints=1"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_NE(b.out.find("refusing damaged checkpoint " + dir + "/step-00000040: model.safetensors fails its checksum"),
            std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("resumed from " + dir + "/step-00000038"), std::string::npos) << b.out;
  EXPECT_TRUE(fs::exists(dir + "/step-00000039")) << "retention deleted the checkpoint it had just written";

  // So the next --resume has something good to continue from, and finishes the run.
  const RunResult c = RunDdpMlp(CheckpointedJob(dir, {"--resume"}));
  ASSERT_EQ(c.exit_code, 0) << Explain(c);
  EXPECT_NE(c.out.find("resumed from " + dir + "/step-00000039: epoch 3, batch 1, step 39"), std::string::npos)
      << c.out;
}

TEST(DdpMlpLimits, AFifoAsTrainerStateOrInitFromIsRefusedAtOnce) {
  const std::string dir = FreshDir("fifo");
  const RunResult a = RunDdpMlp(CheckpointedJob(dir, {"--max_steps=19"}));
  ASSERT_EQ(a.exit_code, 0) << Explain(a);
  const std::string state = dir + "/step-00000019/trainer_state.json";
  fs::remove(state);
  ASSERT_EQ(::mkfifo(state.c_str(), 0644), 0) << std::strerror(errno);

  // Without the fix rank 0 waits in open() for a writer, until rank 1's --timeout=20s ends the run.
  auto started = std::chrono::steady_clock::now();
  const RunResult b = RunDdpMlp(CheckpointedJob(dir, {"--resume", "--max_steps=20"}));
  ASSERT_EQ(b.exit_code, 0) << Explain(b);
  EXPECT_LT(SecondsSince(started), 15) << Explain(b);
  EXPECT_NE(b.out.find("refusing damaged checkpoint " + dir + "/step-00000019: " + state +
                       " is a FIFO (named pipe), not a regular file"),
            std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("resumed from " + dir + "/step-00000010"), std::string::npos) << b.out;

  // --init_from: every rank would wait in open(), with no collective pending to time out.
  const std::string fifo = FreshDir("init_fifo") + "/weights.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0) << std::strerror(errno);
  started = std::chrono::steady_clock::now();
  const RunResult c = RunDdpMlp(TinyJob("gloo", {"--epochs=1", "--timeout=20s", "--init_from=" + fifo}));
  EXPECT_EQ(c.exit_code, 1) << Explain(c);
  EXPECT_LT(SecondsSince(started), 15) << Explain(c);
  EXPECT_NE(c.err.find("safetensors file " + fifo + ": not a regular file (a FIFO)"), std::string::npos) << c.err;
}

// Runs ddp_mlp with its address space limited to `bytes` per process (`ulimit -v`), inherited by the
// workers it starts.
RunResult RunUnderAddressSpaceLimit(const std::vector<std::string>& flags, rlim_t bytes) {
  rlimit saved{};
  ::getrlimit(RLIMIT_AS, &saved);
  rlimit limited = saved;
  limited.rlim_cur = bytes;
  ::setrlimit(RLIMIT_AS, &limited);
  RunResult r = RunDdpMlp(flags);
  ::setrlimit(RLIMIT_AS, &saved);
  return r;
}

TEST(DdpMlpLimits, AModelTooLargeForThisMachineIsRefusedWithinSecondsWithTheFigures) {
  // The issue's --hidden=100000000 (16 GiB of weights alone) under `ulimit -v` 4 GiB: without the check
  // each rank allocates until the limit ends it in SIGABRT.
  auto started = std::chrono::steady_clock::now();
  const RunResult capped = RunUnderAddressSpaceLimit(TinyJob("gloo", {"--hidden=100000000"}), rlim_t{4} << 30);
  EXPECT_EQ(capped.exit_code, 2) << Explain(capped);
  EXPECT_LT(SecondsSince(started), 10);
  EXPECT_NE(capped.err.find("ddp_mlp: --hidden=100000000 needs about "), std::string::npos) << capped.err;
  EXPECT_NE(capped.err.find("parameters 16.0 GiB, gradients 16.0 GiB, SGD momentum 16.0 GiB"), std::string::npos)
      << capped.err;
  EXPECT_NE(capped.err.find("ulimit -v allows each process 4.0 GiB of address space"), std::string::npos) << capped.err;
  EXPECT_NE(capped.err.find("--ignore_worker_limits starts it anyway"), std::string::npos) << capped.err;
  EXPECT_EQ(capped.err.find("starting 2 worker(s)"), std::string::npos) << "refused before any worker started\n"
                                                                       << capped.err;
  EXPECT_EQ(capped.err.find("SIG"), std::string::npos) << capped.err;

  // 1.6 TiB of weights per rank: more than any machine this runs on has available.
  started = std::chrono::steady_clock::now();
  const RunResult huge = RunDdpMlp(TinyJob("gloo", {"--hidden=10000000000"}));
  EXPECT_EQ(huge.exit_code, 2) << Explain(huge);
  EXPECT_LT(SecondsSince(started), 10);
  EXPECT_NE(huge.err.find(" x 2 ranks = "), std::string::npos) << huge.err;
  EXPECT_NE(huge.err.find(", but this machine has "), std::string::npos) << huge.err;
  EXPECT_NE(huge.err.find(" available (MemAvailable "), std::string::npos) << huge.err;
  EXPECT_EQ(huge.err.find("SIG"), std::string::npos) << huge.err;
}

// A Fashion-MNIST folder whose test images are a gzip bomb: a header saying 10000 images of 28x28 (7.5 MiB),
// then 1 GiB of zeros, which gzip keeps to about 1 MiB; the labels are real (10000 zeros). Returns the folder.
std::string GzipBombDataDir() {
  const std::string dir = FreshDir("bomb");
  auto header = [](std::vector<uint32_t> words) {
    std::string bytes;
    for (uint32_t w : words) {
      for (int shift : {24, 16, 8, 0}) bytes.push_back(static_cast<char>(w >> shift));
    }
    return bytes;
  };
  gzFile images = gzopen((dir + "/t10k-images-idx3-ubyte.gz").c_str(), "wb1");
  const std::string image_header = header({0x00000803, 10000, 28, 28});
  gzwrite(images, image_header.data(), image_header.size());
  const std::string zeros(1 << 20, '\0');
  for (int mib = 0; mib < 1024; ++mib) gzwrite(images, zeros.data(), zeros.size());
  gzclose(images);
  gzFile labels = gzopen((dir + "/t10k-labels-idx1-ubyte.gz").c_str(), "wb");
  const std::string label_file = header({0x00000801, 10000}) + std::string(10000, '\0');
  gzwrite(labels, label_file.data(), label_file.size());
  gzclose(labels);
  return dir;
}

TEST(DdpMlpLimits, AGzipBombAsAFashionMnistFileIsRefusedWithTheSizeItsHeaderPromises) {
  // The bomb inflated to 5 GiB under `ulimit -v` 8 GiB; this one to 1 GiB under 1 GiB: inflating it
  // whole ends ddp_mlp in bad_alloc (SIGABRT) before any message. ddp_mlp checks the test split before it
  // starts its ranks.
  const std::string dir = GzipBombDataDir();
  const RunResult r = RunUnderAddressSpaceLimit({"--data_dir=" + dir, "--nproc=2", "--backend=gloo"}, rlim_t{1} << 30);
  EXPECT_EQ(r.exit_code, 1) << Explain(r);
  EXPECT_NE(r.err.find(dir + "/t10k-images-idx3-ubyte.gz: its IDX header promises 10000x28x28 uint8 elements "
                             "(7840016 bytes with the header), but the file holds more: a gzip bomb or a damaged "
                             "file; re-download it (Fashion-MNIST: sudo apt-get install --reinstall "
                             "dataset-fashion-mnist)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
}

TEST(DdpMlpLimits, AFullDiskOrAReadOnlyCheckpointFolderEndsTheRunWithThePermanentStatus) {
  // 8 KiB: room for the first checkpoint's model file, not for its optimizer state.
  const std::string full = FreshDir("full_disk");
  if (const std::string why = MountTmpfs(full, 8192, false); !why.empty()) GTEST_SKIP() << "needs a tmpfs: " << why;
  const RunResult r = RunDdpMlp(CheckpointedJob(full, {"--epochs=1"}));
  EXPECT_EQ(r.exit_code, kPermanentFailureExitCode) << Explain(r);
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the disk is full: 0.0 MiB free in " + full), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("failed first: exit code 73"), std::string::npos) << r.err;

  const std::string read_only = FreshDir("read_only");
  ASSERT_EQ(MountTmpfs(read_only, 1 << 20, true), "");
  const RunResult ro = RunDdpMlp(CheckpointedJob(read_only + "/ckpt", {"--epochs=1"}));
  EXPECT_EQ(ro.exit_code, kPermanentFailureExitCode) << Explain(ro);
  EXPECT_NE(ro.err.find("--checkpoint_dir=" + read_only + "/ckpt: cannot create the folder"), std::string::npos)
      << ro.err;
  EXPECT_NE(ro.err.find("Read-only file system"), std::string::npos) << ro.err;
}

}  // namespace
}  // namespace tinyddp::testing
