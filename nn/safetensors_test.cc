// Safetensors: round trips, byte-for-byte agreement with the reference library, atomic writes, module
// and optimizer checkpoints, and a fuzz-style sweep of truncated and corrupted files that must each end
// in a clean error.
#include "nn/safetensors.h"

#include <dirent.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nn/checkpoint.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace tinyddp::nn {
namespace {

std::string TempPath(const std::string& name) { return absl::StrCat(testing::TempDir(), "/", name); }

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()); }

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

Tensor RandomFloat(Shape shape, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape));
  ops::UniformInit(t, -2.0, 2.0, seed);
  return t;
}

// A tensor of any dtype with arbitrary bytes.
Tensor RandomBytes(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::Empty(std::move(shape), dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

TensorMap SampleTensors() {
  return {{"layer.weight", RandomFloat({3, 5}, 1)},
          {"layer.bias", RandomFloat({3}, 2)},
          {"f64", RandomBytes({2, 2}, DType::kFloat64, 3)},
          {"bf16", RandomBytes({7}, DType::kBFloat16, 4)},
          {"i32", RandomBytes({1, 3}, DType::kInt32, 5)},
          {"i64", RandomBytes({2}, DType::kInt64, 6)},
          {"u8", RandomBytes({5}, DType::kUInt8, 7)},
          {"scalar", RandomFloat({}, 8)},
          {"empty", Tensor::Empty({0, 4})}};
}

TEST(Safetensors, RoundTripKeepsEveryDtypeShapeByteAndMetadata) {
  const TensorMap tensors = SampleTensors();
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(SaveSafetensors(path, tensors, {{"format", "pt"}, {"step", "12"}}).ok());
  absl::StatusOr<SafetensorsContents> loaded = LoadSafetensors(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->metadata, (StringMap{{"format", "pt"}, {"step", "12"}}));
  ASSERT_EQ(loaded->tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const Tensor& u = loaded->tensors.at(name);
    EXPECT_EQ(u.dtype(), t.dtype()) << name;
    EXPECT_EQ(u.shape(), t.shape()) << name;
    EXPECT_EQ(Bytes(u), Bytes(t)) << name;
  }
}

// The reference library's own serialization tests (safetensors/src/tensor.rs) give these exact bytes.
TEST(Safetensors, SerializesByteForByteLikeTheReferenceLibrary) {
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  std::string expected_json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(expected_json.size(), 64u);  // already a multiple of 8: no padding
  std::string expected = std::string("\x40\0\0\0\0\0\0\0", 8) + expected_json +
                         std::string(reinterpret_cast<const char*>(values.data()), 24);
  absl::StatusOr<std::string> bytes = SerializeSafetensors({{"attn.0", Tensor::FromVector(values, {1, 2, 3})}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, expected);

  // A shorter name: 7 spaces of padding bring the header to 72 bytes.
  bytes = SerializeSafetensors({{"attn0", Tensor::FromVector(values, {1, 1, 2, 3})}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->substr(0, 8), std::string("\x48\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes->substr(8, 72),
            std::string(R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})") + "       ");

  // Metadata only.
  bytes = SerializeSafetensors({}, {{"framework", "pt"}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, OrdersDataByDtypeAlignmentThenName) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors({{"a", Tensor::Zeros({3}, DType::kUInt8)},
                                                            {"b", Tensor::Zeros({2})},
                                                            {"c", Tensor::Zeros({1}, DType::kInt64)},
                                                            {"d", Tensor::Zeros({1})}});
  ASSERT_TRUE(bytes.ok());
  EXPECT_NE(bytes->find(R"({"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],)"
                        R"("data_offsets":[8,16]},"d":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},"a":)"),
            std::string::npos)
      << *bytes;
}

TEST(Safetensors, AtomicWriteReplacesTheFileAndLeavesNoTemporaryBehind) {
  const std::string dir = TempPath("atomic");
  ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(SaveSafetensors(path, {{"x", RandomFloat({4}, 1)}}).ok());
  const Tensor second = RandomFloat({6}, 2);
  ASSERT_TRUE(SaveSafetensors(path, {{"x", second}}).ok());
  absl::StatusOr<SafetensorsContents> loaded = LoadSafetensors(path);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(Bytes(loaded->tensors.at("x")), Bytes(second));
  std::vector<std::string> entries;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') entries.push_back(e->d_name);
  }
  closedir(d);
  EXPECT_EQ(entries, std::vector<std::string>{"model.safetensors"});
}

TEST(Safetensors, WriteIntoAMissingDirectoryIsAnErrorNamingThePath) {
  const absl::Status s = SaveSafetensors("/nonexistent-dir/x.safetensors", {{"x", RandomFloat({2}, 1)}});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.safetensors"), std::string::npos) << s;
}

TEST(Safetensors, ReservedNameCannotBeWritten) {
  EXPECT_EQ(SerializeSafetensors({{"__metadata__", RandomFloat({2}, 1)}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Corrupted input ------------------------------------------------------------------------------

// A file with the given header text (unpadded is fine) followed by `data_bytes` bytes.
std::string FileWithHeader(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x7f');
}

void ExpectCleanError(const std::string& bytes, const std::string& expected_fragment) {
  absl::StatusOr<SafetensorsContents> parsed = ParseSafetensors(bytes, "crafted.safetensors");
  ASSERT_FALSE(parsed.ok()) << "accepted: " << bytes.substr(0, 200);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("crafted.safetensors"), std::string::npos) << parsed.status();
  EXPECT_NE(parsed.status().message().find(expected_fragment), std::string::npos) << parsed.status();
}

TEST(SafetensorsFuzz, EveryTruncationOfAValidFileIsACleanError) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(
      {{"w", RandomFloat({3, 2}, 1)}, {"b", RandomFloat({3}, 2)}, {"n", RandomBytes({2}, DType::kInt64, 3)}},
      {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(ParseSafetensors(*bytes).ok());
  const std::string path = TempPath("truncated.safetensors");
  for (size_t n = 0; n < bytes->size(); ++n) {
    const std::string prefix = bytes->substr(0, n);
    absl::StatusOr<SafetensorsContents> parsed = ParseSafetensors(prefix, "t");
    EXPECT_FALSE(parsed.ok()) << "truncated at " << n;
    WriteFile(path, prefix);
    absl::StatusOr<SafetensorsContents> loaded = LoadSafetensors(path);
    ASSERT_FALSE(loaded.ok()) << "truncated at " << n;
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    EXPECT_NE(loaded.status().message().find(path), std::string::npos) << loaded.status();
  }
}

TEST(SafetensorsFuzz, RandomByteFlipsNeverCrashAndEitherParseOrFailCleanly) {
  absl::StatusOr<std::string> bytes =
      SerializeSafetensors({{"w", RandomFloat({4, 3}, 1)}, {"b", RandomBytes({3}, DType::kBFloat16, 2)}});
  ASSERT_TRUE(bytes.ok());
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string corrupt = *bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) corrupt[rng() % corrupt.size()] ^= static_cast<char>(1 + rng() % 255);
    absl::StatusOr<SafetensorsContents> parsed = ParseSafetensors(corrupt, "flipped");
    if (!parsed.ok()) {
      ++rejected;
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
    } else {
      size_t total = 0;  // whatever was accepted must describe the bytes that are there
      for (const auto& [name, t] : parsed->tensors) total += t.nbytes();
      EXPECT_LE(total, corrupt.size());
    }
  }
  EXPECT_GT(rejected, 100) << "flips in the header must be caught";
}

TEST(SafetensorsFuzz, CraftedHeadersAreRejectedWithTheReason) {
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  ASSERT_TRUE(ParseSafetensors(FileWithHeader("{" + ok_entry + "}", 8)).ok());

  ExpectCleanError(std::string("\x05\0\0", 3), "shorter than the 8-byte header length");
  ExpectCleanError(std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8) + "{}", "exceeds the limit");
  ExpectCleanError(std::string("\x01\xe1\xf5\x05\0\0\0\0", 8) + "{}", "exceeds the limit");  // 100000001
  ExpectCleanError(std::string("\x10\0\0\0\0\0\0\0", 8) + "{}", "runs past the end of the file");
  ExpectCleanError(FileWithHeader("{\"x\": ", 0), "not valid JSON");
  ExpectCleanError(FileWithHeader("\xff\xfe{}", 0), "not valid JSON");
  ExpectCleanError(FileWithHeader("[1, 2]", 0), "not a JSON object");
  ExpectCleanError(FileWithHeader(std::string(200000, '[') + std::string(200000, ']'), 0), "not a JSON object");
  ExpectCleanError(FileWithHeader(R"({"x": 3})", 0), "entry is not a JSON object");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2]}})", 8), "exactly the keys");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"y":1}})", 8),
                   "exactly the keys");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", 4), "unsupported");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,4]}})", 4), "unknown dtype");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":7,"shape":[2],"data_offsets":[0,4]}})", 4), "not a string");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                   "not a non-negative integer");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
                   "not a non-negative integer");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8), "not an array");
  ExpectCleanError(
      FileWithHeader(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
      "more elements than can exist");
  ExpectCleanError(
      FileWithHeader(R"({"x":{"dtype":"F64","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8),
      "more elements than can exist");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}})", 12), "do not hold");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "do not hold");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "data_offsets");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8), "data_offsets");
  ExpectCleanError(
      FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12),
      "overlaps");
  ExpectCleanError(FileWithHeader(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                   "must be contiguous");
  ExpectCleanError(FileWithHeader("{" + ok_entry + "}", 4), "truncated");
  ExpectCleanError(FileWithHeader("{" + ok_entry + "}", 9), "trailing bytes");
  ExpectCleanError(FileWithHeader(R"({"__metadata__":{"a":1},)" + ok_entry + "}", 8), "is not a string");
  ExpectCleanError(FileWithHeader(R"({"__metadata__":[],)" + ok_entry + "}", 8), "__metadata__ is not");
}

TEST(SafetensorsFuzz, MissingFileAndDirectoryAreErrors) {
  EXPECT_EQ(LoadSafetensors(TempPath("does-not-exist")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(LoadSafetensors(testing::TempDir()).ok());
}

// --- Modules and optimizers ---------------------------------------------------------------------

TEST(Checkpoint, ModuleRoundTripRestoresEveryParameterInPlace) {
  MlpOptions a_options, b_options;
  a_options.seed = 1;
  b_options.seed = 2;
  auto a = MLP({6, 5, 3}, a_options), b = MLP({6, 5, 3}, b_options);
  const std::string path = TempPath("mlp.safetensors");
  ASSERT_TRUE(SaveModule(*a, path).ok());
  const void* b_weight_memory = b->Parameters()[0].data().data_ptr();
  ASSERT_TRUE(LoadModule(*b, path).ok());
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Bytes(a->Parameters()[i].data()), Bytes(b->Parameters()[i].data()));
  }
  EXPECT_EQ(b->Parameters()[0].data().data_ptr(), b_weight_memory) << "loaded into the existing tensor";
  EXPECT_EQ(LoadSafetensors(path)->metadata.at("format"), "pt");
}

TEST(Checkpoint, LoadIsStrictAboutNamesShapesAndDtypes) {
  auto small = MLP({6, 5, 3}), deep = MLP({6, 5, 5, 3}), wide = MLP({6, 7, 3});
  const std::string path = TempPath("small.safetensors");
  ASSERT_TRUE(SaveModule(*small, path).ok());
  const std::vector<float> before = deep->Parameters()[0].data().ToVector<float>();
  absl::Status s = LoadModule(*deep, path);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing keys [4.weight, 4.bias]"), std::string::npos) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_EQ(deep->Parameters()[0].data().ToVector<float>(), before) << "nothing loaded on error";

  s = LoadModule(*small, TempPath("does-not-exist"));
  EXPECT_FALSE(s.ok());
  s = LoadModule(*wide, path);
  EXPECT_NE(s.message().find("'0.weight' is float32 [5, 6] in the file but float32 [7, 6]"), std::string::npos) << s;
  TensorMap doubled = StateDictOf(*small);
  doubled["0.bias"] = Tensor::Zeros({5}, DType::kFloat64);
  s = LoadStateDict(*small, doubled, "doubled");
  EXPECT_NE(s.message().find("float64 [5] in the file but float32 [5]"), std::string::npos) << s;
  TensorMap extra = StateDictOf(*small);
  extra["5.weight"] = Tensor::Zeros({1});
  s = LoadStateDict(*small, extra, "extra");
  EXPECT_NE(s.message().find("unexpected keys [5.weight]"), std::string::npos) << s;
}

TEST(Checkpoint, OptimizerStateRoundTripsThroughAFile) {
  auto model = MLP({4, 3, 2});
  SGD sgd(model->Parameters(), {.lr = 0.1, .momentum = 0.9});
  for (const Variable& p : model->Parameters()) p.set_grad(RandomFloat(p.shape(), 9));
  sgd.Step();
  const std::string path = TempPath("sgd.safetensors");
  ASSERT_TRUE(SaveOptimizer(sgd, path).ok());
  SGD restored(model->Parameters(), {.lr = 0.1, .momentum = 0.9});
  ASSERT_TRUE(LoadOptimizer(restored, path).ok());
  const TensorMap a = sgd.StateTensors(), b = restored.StateTensors();
  ASSERT_EQ(a.size(), 4u);
  for (const auto& [name, t] : a) EXPECT_EQ(Bytes(b.at(name)), Bytes(t)) << name;
}

}  // namespace
}  // namespace tinyddp::nn
