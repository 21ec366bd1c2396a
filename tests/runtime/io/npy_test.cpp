#include "runtime/io/npy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace moert::io {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/moert_npy_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// A hand-built .npy image: magic, version, header length (2 or 4 bytes), header, data.
std::string npy_image(int major, const std::string& header, const std::string& data) {
  std::string out = std::string("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const size_t length_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

TEST_F(NpyTest, RoundTripsSeveralShapes) {
  for (const Shape& shape : {Shape{2, 3}, Shape{5}, Shape{}, Shape{0, 3}, Shape{2, 1, 4}}) {
    const int64_t numel = shape_numel(shape);
    std::vector<float> values(static_cast<size_t>(numel));
    for (int64_t i = 0; i < numel; ++i) values[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 1.5f;
    const std::string path = file("a.npy");
    ASSERT_TRUE(write_npy_f32(path, shape, values.data()).is_ok()) << shape_to_string(shape);
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    const std::string bytes = read_bytes(path);
    ASSERT_GE(bytes.size(), 10u);
    EXPECT_EQ(bytes.substr(0, 6), std::string("\x93NUMPY", 6));
    EXPECT_EQ(bytes[6], '\x01');
    EXPECT_EQ(bytes[7], '\x00');
    const size_t header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    EXPECT_EQ((10 + header_len) % 64, 0u) << shape_to_string(shape);
    const std::string header = bytes.substr(10, header_len);
    EXPECT_EQ(header.back(), '\n');
    EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
    EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
    EXPECT_EQ(bytes.size(), 10 + header_len + values.size() * 4);

    auto array = read_npy(path);
    ASSERT_TRUE(array.is_ok()) << array.status().to_string();
    EXPECT_EQ(array->shape, shape);
    ASSERT_EQ(array->values.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(array->values[i], static_cast<double>(values[i]));
  }
}

TEST_F(NpyTest, WriterSpellsOneDimTuplesTheNumpyWay) {
  const float v[3] = {1, 2, 3};
  ASSERT_TRUE(write_npy_f32(file("v.npy"), {3}, v).is_ok());
  EXPECT_NE(read_bytes(file("v.npy")).find("'shape': (3,)"), std::string::npos);
  ASSERT_TRUE(write_npy_f32(file("s.npy"), {}, v).is_ok());
  EXPECT_NE(read_bytes(file("s.npy")).find("'shape': ()"), std::string::npos);
}

TEST_F(NpyTest, ReadsFloat64Version2) {
  const std::vector<double> values = {1.0, -2.5, 1e300, 0.125};
  write_bytes(file("d.npy"), npy_image(2, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (2, 2)}\n",
                                       raw(values)));
  auto array = read_npy(file("d.npy"));
  ASSERT_TRUE(array.is_ok()) << array.status().to_string();
  EXPECT_EQ(array->shape, (Shape{2, 2}));
  EXPECT_EQ(array->values, values);
}

TEST_F(NpyTest, ReadsPython2LongShape) {
  const std::vector<float> values = {1, 2};
  write_bytes(file("l.npy"), npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }\n", raw(values)));
  auto array = read_npy(file("l.npy"));
  ASSERT_TRUE(array.is_ok()) << array.status().to_string();
  EXPECT_EQ(array->shape, (Shape{2}));
}

void expect_status(const Result<NpyArray>& result, StatusCode code, const std::string& needle) {
  EXPECT_EQ(result.status().code(), code) << result.status().to_string();
  EXPECT_NE(result.status().message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << result.status().message();
}

TEST_F(NpyTest, MissingFileIsNotFound) { expect_status(read_npy(file("nope.npy")), StatusCode::kNotFound, "nope.npy"); }

TEST_F(NpyTest, BadMagicIsCorrupt) {
  write_bytes(file("m.npy"), "PK\x03\x04 not numpy");
  expect_status(read_npy(file("m.npy")), StatusCode::kCorrupt, "bad magic");
}

TEST_F(NpyTest, Version3IsUnsupported) {
  write_bytes(file("v3.npy"), npy_image(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", raw(std::vector<float>{1})));
  expect_status(read_npy(file("v3.npy")), StatusCode::kUnsupported, "version 3.0");
}

TEST_F(NpyTest, BigEndianAndIntegerDtypesAreUnsupported) {
  write_bytes(file("be.npy"), npy_image(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", "abcd"));
  expect_status(read_npy(file("be.npy")), StatusCode::kUnsupported, "dtype '>f4'");
  write_bytes(file("i4.npy"), npy_image(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }\n", "abcd"));
  expect_status(read_npy(file("i4.npy")), StatusCode::kUnsupported, "dtype '<i4'");
}

TEST_F(NpyTest, FortranOrderIsUnsupported) {
  write_bytes(file("f.npy"), npy_image(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", "abcd"));
  expect_status(read_npy(file("f.npy")), StatusCode::kUnsupported, "fortran_order True");
}

TEST_F(NpyTest, MalformedHeaderIsCorrupt) {
  write_bytes(file("h.npy"), npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,\n", "abcd"));
  expect_status(read_npy(file("h.npy")), StatusCode::kCorrupt, "bad header");
  write_bytes(file("k.npy"), npy_image(1, "{'descr': '<f4', 'fortran_order': False}\n", "abcd"));
  expect_status(read_npy(file("k.npy")), StatusCode::kCorrupt, "no tuple 'shape'");
  write_bytes(file("n.npy"), npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}\n", ""));
  expect_status(read_npy(file("n.npy")), StatusCode::kCorrupt, "non-negative");
}

TEST_F(NpyTest, HeaderLengthPastEndIsCorrupt) {
  std::string bytes = npy_image(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", "");
  bytes[8] = '\xff';
  write_bytes(file("p.npy"), bytes);
  expect_status(read_npy(file("p.npy")), StatusCode::kCorrupt, "runs past the end");
}

TEST_F(NpyTest, TruncatedDataIsCorrupt) {
  const float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(write_npy_f32(file("t.npy"), {4}, v).is_ok());
  std::string bytes = read_bytes(file("t.npy"));
  bytes.resize(bytes.size() - 2);
  write_bytes(file("t.npy"), bytes);
  expect_status(read_npy(file("t.npy")), StatusCode::kCorrupt, "needs 16 data bytes but the file has 14");
}

TEST(NpyReferenceTest, ReadsReferencePromptLogits) {
  const char* shared = std::getenv("MOERT_SHARED_DIR");
  if (shared == nullptr) GTEST_SKIP() << "MOERT_SHARED_DIR is not set";
  const std::string path = std::string(shared) + "/reference/qwen3moe-tiny/ref.prompt_logits.npy";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing";
  auto array = read_npy(path);
  ASSERT_TRUE(array.is_ok()) << array.status().to_string();
  EXPECT_EQ(array->shape, (Shape{16, 1024}));
  ASSERT_EQ(array->values.size(), 16u * 1024u);
  for (double v : array->values) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace moert::io
