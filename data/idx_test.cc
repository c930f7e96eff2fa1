// The IDX reader on real files written by the test: valid plain and gzip files load exactly; every kind
// of damage (bad magic, wrong type or rank, truncated header or data, junk after the data, image/label
// count mismatch, label out of range, truncated or corrupt gzip, missing files) gives a clean status
// that names the file and the problem; a gzip bomb is refused having inflated no more than its header promises.
#include "data/idx.h"

#include <sys/resource.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "data/fashion_mnist.h"
#include "gtest/gtest.h"

namespace tinyddp::data {
namespace {

// True when `text` contains `part`; the assertion message shows both.
testing::AssertionResult Mentions(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "\"" << text << "\" does not mention \"" << part << "\"";
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Header(uint32_t magic, std::vector<uint32_t> dims) {
  std::string h;
  for (uint32_t v : std::vector<uint32_t>{magic}) dims.insert(dims.begin(), v);
  for (uint32_t v : dims) {
    h.push_back(static_cast<char>(v >> 24));
    h.push_back(static_cast<char>(v >> 16));
    h.push_back(static_cast<char>(v >> 8));
    h.push_back(static_cast<char>(v));
  }
  return h;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

std::string GzipBytes(const std::string& bytes) {
  const std::string path = TempDir() + "/scratch.gz";
  gzFile g = gzopen(path.c_str(), "wb");
  EXPECT_NE(g, nullptr);
  EXPECT_EQ(gzwrite(g, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  gzclose(g);
  FILE* f = std::fopen(path.c_str(), "rb");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

// A small random MNIST-like pair with odd sizes: 7 images of 5x3 pixels, labels in [0, 10).
struct Fixture {
  std::string pixels, labels;
  Fixture() {
    std::mt19937 rng(11);
    for (int i = 0; i < 7 * 5 * 3; ++i) pixels.push_back(static_cast<char>(rng() % 256));
    pixels[0] = 0;
    pixels[1] = static_cast<char>(255);
    for (int i = 0; i < 7; ++i) labels.push_back(static_cast<char>(rng() % 10));
  }
  std::string images_file() const { return Header(0x803, {7, 5, 3}) + pixels; }
  std::string labels_file() const { return Header(0x801, {7}) + labels; }
};

absl::Status LoadPair(const std::string& images, const std::string& labels, const std::string& tag) {
  const std::string ip = absl::StrCat(TempDir(), "/", tag, "-images"), lp = absl::StrCat(TempDir(), "/", tag, "-labels");
  WritePlain(ip, images);
  WritePlain(lp, labels);
  return LoadIdxDataset(ip, lp).status();
}

TEST(Idx, PlainAndGzipFilesLoadToTheSameExactValues) {
  Fixture fx;
  for (bool gz : {false, true}) {
    const std::string dir = TempDir();
    const std::string ip = dir + (gz ? "/ok-images.gz" : "/ok-images");
    const std::string lp = dir + (gz ? "/ok-labels.gz" : "/ok-labels");
    WritePlain(ip, gz ? GzipBytes(fx.images_file()) : fx.images_file());
    WritePlain(lp, gz ? GzipBytes(fx.labels_file()) : fx.labels_file());
    absl::StatusOr<TensorDataset> ds = LoadIdxDataset(ip, lp);
    ASSERT_TRUE(ds.ok()) << ds.status();
    ASSERT_EQ(ds->inputs().shape(), Shape({7, 15}));
    const std::vector<float> x = ds->inputs().ToVector<float>();
    const std::vector<int64_t> y = ds->labels().ToVector<int64_t>();
    for (int i = 0; i < 7 * 15; ++i) {
      EXPECT_EQ(x[i], static_cast<float>(static_cast<uint8_t>(fx.pixels[i])) / 255.0f);
    }
    EXPECT_EQ(x[0], 0.0f);
    EXPECT_EQ(x[1], 1.0f);
    for (int i = 0; i < 7; ++i) EXPECT_EQ(y[i], fx.labels[i]);
  }
}

TEST(Idx, ReadIdxFileReportsDimsOfAValidFile) {
  const std::string path = TempDir() + "/dims";
  WritePlain(path, Fixture().images_file());
  absl::StatusOr<IdxArray> a = ReadIdxFile(path, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dims, (std::vector<int64_t>{7, 5, 3}));
  EXPECT_EQ(a->num_elements(), 105);
  EXPECT_EQ(a->data()[1], 255);
}

struct Damage {
  std::string what, images, labels, expected;
};

TEST(Idx, EveryKindOfDamageGivesAStatusNamingTheFileAndProblem) {
  Fixture fx;
  const std::string img = fx.images_file(), lab = fx.labels_file();
  std::string bad_label = lab;
  bad_label.back() = 10;
  const std::vector<Damage> cases = {
      {"bad-magic", "\x12\x34" + img.substr(2), lab, "bad magic number 0x12340803"},
      {"float-type", Header(0xD03, {7, 5, 3}) + fx.pixels, lab, "0x0d (float32) is not supported"},
      {"labels-as-images", lab, lab, "says 1 dimensions, expected 3"},
      {"short-magic", img.substr(0, 3), lab, "fewer than the 4-byte magic"},
      {"truncated-header", img.substr(0, 10), lab, "truncated IDX header"},
      {"truncated-data", img.substr(0, img.size() - 1), lab, "truncated data: the header promises 7x5x3"},
      {"huge-dims", Header(0x803, {0xffffffff, 0xffffffff, 0xffffffff}) + fx.pixels, lab, "truncated data"},
      {"trailing-bytes", img + "xyz", lab, "3 unexpected bytes after the data"},
      {"count-mismatch", img, Header(0x801, {6}) + fx.labels.substr(0, 6), "holds 7 images but"},
      {"label-out-of-range", img, bad_label, "label 10 of example 6 is not a class in [0, 10)"},
      {"empty-file", "", lab, "truncated IDX header: the file has 0 bytes"},
  };
  for (const Damage& c : cases) {
    absl::Status s = LoadPair(c.images, c.labels, c.what);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_TRUE(Mentions(std::string(s.message()), c.expected)) << c.what;
    EXPECT_TRUE(Mentions(std::string(s.message()), c.what)) << "the message must name the file: " << s;
  }
}

TEST(Idx, TruncatedOrCorruptGzipGivesDataLoss) {
  const std::string gz = GzipBytes(Fixture().images_file());
  const std::string labels = GzipBytes(Fixture().labels_file());
  std::string flipped = gz;
  flipped[gz.size() / 2] ^= 0x5a;  // inside the deflate data: bad codes or a CRC mismatch
  std::string bad_crc = gz;
  bad_crc[gz.size() - 6] ^= 0x01;  // inside the CRC-32 of the trailer
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"gz-cut-in-half", gz.substr(0, gz.size() / 2)},
           {"gz-cut-before-trailer", gz.substr(0, gz.size() - 8)},
           {"gz-flipped-byte", flipped},
           {"gz-bad-crc", bad_crc},
           {"gz-junk-after", gz + "junk"}}) {
    absl::Status s = LoadPair(bytes, labels, name);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << name << ": " << s;
    EXPECT_TRUE(Mentions(std::string(s.message()), name)) << s;
  }
}

TEST(Idx, ConcatenatedGzipMembersReadAsOneFile) {
  Fixture fx;
  const std::string img = fx.images_file();
  const std::string path = TempDir() + "/two-members.gz";
  WritePlain(path, GzipBytes(img.substr(0, 40)) + GzipBytes(img.substr(40)));
  absl::StatusOr<IdxArray> a = ReadIdxFile(path, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->contents, img);
}

// The bomb, smaller: a header saying 10 images of 28x28 (7856 bytes in all), then those pixels and
// 200 MiB of zeros, which gzip keeps to a few hundred KiB on disk. Read in a child whose address space may
// grow by only 64 MiB, so inflating the whole file would end it in bad_alloc (SIGABRT), not in the message.
TEST(Idx, AGzipBombIsRefusedHavingInflatedNoMoreThanItsHeaderPromises) {
  const std::string path = TempDir() + "/bomb-images-idx3-ubyte.gz";
  gzFile g = gzopen(path.c_str(), "wb9");
  ASSERT_NE(g, nullptr);
  const std::string header = Header(0x00000803, {10, 28, 28});
  ASSERT_EQ(gzwrite(g, header.data(), header.size()), static_cast<int>(header.size()));
  const std::string zeros(1 << 20, '\0');
  for (int mib = 0; mib < 200; ++mib) ASSERT_EQ(gzwrite(g, zeros.data(), zeros.size()), 1 << 20);
  ASSERT_EQ(gzclose(g), Z_OK);

  long pages = 0;  // this process's address space now (/proc/self/statm's first field), which the child inherits
  FILE* statm = std::fopen("/proc/self/statm", "r");
  ASSERT_NE(statm, nullptr);
  ASSERT_EQ(std::fscanf(statm, "%ld", &pages), 1);
  std::fclose(statm);
  const rlim_t budget = static_cast<rlim_t>(pages) * 4096 + (rlim_t{64} << 20);
  auto read_under_limit = [&] {
    const rlimit limit{budget, budget};
    ::setrlimit(RLIMIT_AS, &limit);
    const absl::StatusOr<IdxArray> read = ReadIdxFile(path, 3);
    std::fprintf(stderr, "%s\n", read.status().ToString().c_str());
    std::exit(read.status().code() == absl::StatusCode::kDataLoss ? 0 : 1);
  };
  EXPECT_EXIT(read_under_limit(), testing::ExitedWithCode(0),
              "bomb-images-idx3-ubyte.gz: its IDX header promises 10x28x28 uint8 elements .7856 bytes with the "
              "header., but the file holds more: a gzip bomb or a damaged file; re-download it");
}

TEST(Idx, MissingFileIsNotFoundWithItsPath) {
  absl::StatusOr<IdxArray> a = ReadIdxFile(TempDir() + "/no-such-file", 1);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Mentions(std::string(a.status().message()), "no-such-file"));
}

TEST(FashionMnist, MissingDatasetNamesThePathAndThePackage) {
  absl::StatusOr<TensorDataset> ds = LoadFashionMnist(TempDir() + "/empty-dir", "train");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  const std::string m(ds.status().message());
  EXPECT_TRUE(Mentions(m, "empty-dir/train-images-idx3-ubyte.gz"));
  EXPECT_TRUE(Mentions(m, "Debian package dataset-fashion-mnist"));
  EXPECT_TRUE(Mentions(m, "data_dir"));
  EXPECT_FALSE(Mentions(m, "--data_dir")) << "a flag that only some programs have (ddp_minimal has none)";
  EXPECT_EQ(LoadFashionMnist(TempDir(), "validation").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FashionMnist, FindsPlainAndGzipFilesInADataDir) {
  Fixture fx;
  const std::string dir = TempDir();
  WritePlain(dir + "/t10k-images-idx3-ubyte", fx.images_file());           // plain
  WritePlain(dir + "/t10k-labels-idx1-ubyte.gz", GzipBytes(fx.labels_file()));  // gzip
  absl::StatusOr<TensorDataset> ds = LoadFashionMnist(dir, "test");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ(ds->Size(), 7);
  EXPECT_EQ(ds->input_size(), 15);
}

}  // namespace
}  // namespace tinyddp::data
