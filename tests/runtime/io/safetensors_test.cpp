#include "runtime/io/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <nlohmann/json.hpp>

namespace moert::io {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed (with everything in it) when the test ends.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/moert_safetensors_test_XXXXXX";
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

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// File image: u64 LE header size, `header`, then `data_bytes` zero bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes, uint64_t declared_size = UINT64_MAX) {
  const uint64_t n = declared_size == UINT64_MAX ? header.size() : declared_size;
  std::string text;
  for (int i = 0; i < 8; ++i) text += static_cast<char>((n >> (8 * i)) & 0xff);
  text += header;
  text.append(data_bytes, '\0');
  return std::vector<uint8_t>(text.begin(), text.end());
}

Status parse_image(const std::vector<uint8_t>& bytes) {
  return parse_safetensors_header(bytes.data(), bytes.size(), nullptr, "/x/bad.safetensors").status();
}

// Asserts that parsing fails with kCorrupt, and that the message names the file and `needle`.
void expect_corrupt(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const Status status = parse_image(bytes);
  EXPECT_EQ(status.code(), StatusCode::kCorrupt) << status.to_string();
  EXPECT_NE(status.message().find("/x/bad.safetensors"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(needle), std::string::npos) << "'" << needle << "' not in: " << status.message();
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << "message is not one line: " << status.message();
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin, uint64_t end) {
  return "{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

// Owns the bytes of a test tensor.
struct TestTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;

  NamedTensor named() { return {name, TensorView::contiguous(dtype, shape, bytes.empty() ? nullptr : bytes.data())}; }
};

TestTensor make_tensor(std::string name, DType dtype, Shape shape, uint8_t seed) {
  TestTensor t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.resize(*dtype_storage_bytes(dtype, static_cast<uint64_t>(shape_numel(t.shape))));
  for (size_t i = 0; i < t.bytes.size(); ++i) t.bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  return t;
}

std::vector<TestTensor> sample_tensors() {
  std::vector<TestTensor> t;
  t.push_back(make_tensor("w.bf16", DType::kBF16, {2, 3}, 1));
  t.push_back(make_tensor("w.f32", DType::kF32, {4}, 2));
  t.push_back(make_tensor("a.u8", DType::kU8, {5}, 3));
  t.push_back(make_tensor("ids.i64", DType::kI64, {2}, 4));
  t.push_back(make_tensor("empty.f16", DType::kF16, {0, 4}, 5));
  t.push_back(make_tensor("scalar.f32", DType::kF32, {}, 6));
  t.push_back(make_tensor("scale.f8", DType::kF8E4M3, {3}, 7));
  t.push_back(make_tensor("packed.f4", DType::kF4, {2, 6}, 8));
  return t;
}

// ---- Round trip and layout ---------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripsEveryTensorAndMetadata) {
  std::vector<TestTensor> tensors = sample_tensors();
  std::vector<NamedTensor> named;
  for (TestTensor& t : tensors) named.push_back(t.named());
  const std::string path = file("model.safetensors");
  ASSERT_TRUE(write_safetensors(path, named, {{"format", "pt"}, {"note", "h\xc3\xa9llo"}}).is_ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const SafetensorsFile& st = **opened;
  EXPECT_EQ(st.path(), path);
  EXPECT_EQ(st.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "h\xc3\xa9llo"}}));
  ASSERT_EQ(st.tensors().size(), tensors.size());
  for (size_t i = 1; i < st.tensors().size(); ++i) EXPECT_LE(st.tensors()[i - 1].begin, st.tensors()[i].begin);
  for (const TestTensor& t : tensors) {
    const TensorInfo* info = st.find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->name, t.name);
    EXPECT_EQ(info->dtype, t.dtype) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    EXPECT_EQ(info->end - info->begin, t.bytes.size()) << t.name;
    const TensorView view = st.view(*info);
    EXPECT_EQ(view.dtype, t.dtype);
    EXPECT_EQ(view.shape, t.shape);
    EXPECT_TRUE(view.is_contiguous());
    // memcmp's pointers must not be null even for 0 bytes (an empty tensor has no data).
    if (!t.bytes.empty()) EXPECT_EQ(std::memcmp(view.data, t.bytes.data(), t.bytes.size()), 0) << t.name;
  }
  EXPECT_EQ(st.find("w.f32")->shape, (Shape{4}));
  EXPECT_EQ(st.find("scalar.f32")->shape, Shape{});
  EXPECT_EQ(st.view(*st.find("scalar.f32")).numel(), 1);
  EXPECT_EQ(st.find("empty.f16")->begin, st.find("empty.f16")->end);
  EXPECT_EQ(st.find("absent"), nullptr);
}

TEST_F(SafetensorsTest, WriterPadsHeaderAndOrdersByAlignmentThenName) {
  std::vector<TestTensor> tensors = sample_tensors();
  tensors.push_back(make_tensor("b.i64", DType::kI64, {1}, 9));
  std::vector<NamedTensor> named;
  for (TestTensor& t : tensors) named.push_back(t.named());
  const std::string path = file("layout.safetensors");
  ASSERT_TRUE(write_safetensors(path, named, {}).is_ok());

  const std::vector<uint8_t> bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  EXPECT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');  // padding is spaces only
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_FALSE(json.contains("__metadata__"));  // empty metadata is not written

  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  EXPECT_TRUE((*opened)->metadata().empty());
  // Sorted by begin; zero-size tensors tie with their neighbour, so use the writer's rule:
  // alignment 8 (b.i64, ids.i64), 4 (scalar.f32, w.f32), 2 (empty.f16, w.bf16), 1 (a.u8,
  // packed.f4, scale.f8).
  const std::vector<std::string> expected = {"b.i64",  "ids.i64", "scalar.f32", "w.f32", "empty.f16",
                                             "w.bf16", "a.u8",    "packed.f4",  "scale.f8"};
  uint64_t offset = 0;
  for (const std::string& name : expected) {
    const TensorInfo* info = (*opened)->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->begin, offset) << name;
    EXPECT_EQ(info->begin % static_cast<uint64_t>(dtype_alignment(info->dtype)), 0u) << name;
    offset = info->end;
  }
  EXPECT_EQ(offset, bytes.size() - 8 - n);
  // The mapping is page-aligned and 8 + N is a multiple of 8, so the data buffer is 8-aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*opened)->data_buffer()) % 8, 0u);
}

TEST_F(SafetensorsTest, DefaultMetadataIsFormatPt) {
  TestTensor t = make_tensor("x", DType::kF32, {2}, 1);
  const std::string path = file("default.safetensors");
  ASSERT_TRUE(write_safetensors(path, {t.named()}).is_ok());
  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok());
  EXPECT_EQ((*opened)->metadata().at("format"), "pt");
}

TEST_F(SafetensorsTest, MovedFileKeepsItsMapping) {
  TestTensor t = make_tensor("x", DType::kU8, {16}, 3);
  const std::string path = file("move.safetensors");
  ASSERT_TRUE(write_safetensors(path, {t.named()}).is_ok());
  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok());
  SafetensorsFile moved(std::move(**opened));
  opened->reset();  // destroys the moved-from object; must not unmap
  const TensorInfo* info = moved.find("x");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(std::memcmp(moved.view(*info).data, t.bytes.data(), 16), 0);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  TestTensor a = make_tensor("a", DType::kF32, {2, 2}, 1);
  TestTensor f4 = make_tensor("f4", DType::kF4, {2}, 1);
  const std::string path = file("bad.safetensors");
  EXPECT_EQ(write_safetensors(path, {a.named(), a.named()}).code(), StatusCode::kInvalidArgument);
  NamedTensor reserved = a.named();
  reserved.name = "__metadata__";
  EXPECT_EQ(write_safetensors(path, {reserved}).code(), StatusCode::kInvalidArgument);
  NamedTensor strided = a.named();
  strided.view.strides = {1, 2};
  EXPECT_EQ(write_safetensors(path, {strided}).code(), StatusCode::kInvalidArgument);
  NamedTensor odd = f4.named();
  odd.view.shape = {3};
  odd.view.strides = {1};
  EXPECT_EQ(write_safetensors(path, {odd}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(SafetensorsTest, OpenMissingFileIsNotFound) {
  auto opened = SafetensorsFile::open(file("nope.safetensors"));
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_NE(opened.status().message().find("nope.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, TruncatedFileIsCorrupt) {
  TestTensor t = make_tensor("x", DType::kF32, {8}, 1);
  const std::string path = file("trunc.safetensors");
  ASSERT_TRUE(write_safetensors(path, {t.named()}).is_ok());
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes.resize(bytes.size() - 3);
  write_bytes(path, bytes);
  auto opened = SafetensorsFile::open(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(opened.status().message().find(path), std::string::npos) << opened.status().message();
  EXPECT_NE(opened.status().message().find("missing bytes"), std::string::npos) << opened.status().message();
}

TEST_F(SafetensorsTest, TruncatedInsideHeaderIsCorrupt) {
  TestTensor t = make_tensor("x", DType::kF32, {8}, 1);
  const std::string path = file("trunc2.safetensors");
  ASSERT_TRUE(write_safetensors(path, {t.named()}).is_ok());
  std::vector<uint8_t> bytes = read_bytes(path);
  bytes.resize(20);
  write_bytes(path, bytes);
  auto opened = SafetensorsFile::open(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(opened.status().message().find("runs past the end"), std::string::npos) << opened.status().message();
}

TEST_F(SafetensorsTest, EmptyFileIsCorrupt) {
  const std::string path = file("empty.safetensors");
  write_bytes(path, {});
  auto opened = SafetensorsFile::open(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(opened.status().message().find("shorter than"), std::string::npos) << opened.status().message();
}

// ---- Headers that must be accepted -------------------------------------------------------

TEST(SafetensorsHeaderTest, AcceptsLeadingAndTrailingWhitespace) {
  const auto bytes = image("  \n\t{\"a\":" + entry("F32", "[1]", 0, 4) + "}   \n  ", 4);
  std::map<std::string, std::string> metadata{{"stale", "x"}};
  auto parsed = parse_safetensors_header(bytes.data(), bytes.size(), &metadata, "ws.safetensors");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->size(), 1u);
  EXPECT_TRUE(metadata.empty());
}

TEST(SafetensorsHeaderTest, AcceptsEmptyHeaderScalarsAndZeroSizeTensors) {
  EXPECT_TRUE(parse_image(image("{}", 0)).is_ok());
  const auto bytes = image("{\"z\":" + entry("BF16", "[0,7]", 0, 0) + ",\"s\":" + entry("I64", "[]", 0, 8) +
                               ",\"z2\":" + entry("U8", "[3,0]", 8, 8) + "}",
                           8);
  auto parsed = parse_safetensors_header(bytes.data(), bytes.size(), nullptr, "ok.safetensors");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].name, "z");
  EXPECT_EQ((*parsed)[1].name, "s");
  EXPECT_EQ((*parsed)[1].shape, Shape{});
  EXPECT_EQ((*parsed)[2].name, "z2");
}

TEST(SafetensorsHeaderTest, SameKeyInDifferentObjectsIsNotADuplicate) {
  const auto bytes = image("{\"a\":" + entry("U8", "[1]", 0, 1) + ",\"b\":" + entry("U8", "[1]", 1, 2) +
                               ",\"__metadata__\":{\"dtype\":\"x\"}}",
                           2);
  std::map<std::string, std::string> metadata;
  auto parsed = parse_safetensors_header(bytes.data(), bytes.size(), &metadata, "ok.safetensors");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  EXPECT_EQ(metadata.at("dtype"), "x");
}

TEST(SafetensorsHeaderTest, AcceptsNullMetadataAsAbsent) {
  EXPECT_TRUE(parse_image(image("{\"__metadata__\":null}", 0)).is_ok());
}

// ---- Every corruption case ---------------------------------------------------------------

TEST(SafetensorsHeaderTest, FileShorterThan8Bytes) { expect_corrupt(std::vector<uint8_t>(5, 0), "shorter than"); }

TEST(SafetensorsHeaderTest, HeaderSizeOverLimit) {
  expect_corrupt(image("{}", 0, 100'000'001), "header size 100000001 exceeds the limit");
}

TEST(SafetensorsHeaderTest, HeaderSizePastEndOfFile) {
  expect_corrupt(image("{}", 10, 100), "header size 100 runs past the end");
}

TEST(SafetensorsHeaderTest, HeaderNotUtf8) {
  expect_corrupt(image("{\"a\xff\":" + entry("U8", "[1]", 0, 1) + "}", 1), "not valid UTF-8");
}

TEST(SafetensorsHeaderTest, HeaderNotJson) { expect_corrupt(image("{\"a\": [1, 2", 0), "not valid JSON"); }

TEST(SafetensorsHeaderTest, HeaderNotAnObject) { expect_corrupt(image("[1, 2]", 0), "not a JSON object"); }

TEST(SafetensorsHeaderTest, DuplicateTensorName) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[1]", 0, 1) + ",\"a\":" + entry("U8", "[1]", 1, 2) + "}", 2),
                 "duplicate key 'a'");
}

TEST(SafetensorsHeaderTest, DuplicateKeyInsideEntry) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1),
                 "duplicate key 'dtype'");
}

TEST(SafetensorsHeaderTest, DuplicateKeyInsideMetadata) {
  expect_corrupt(image("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0), "duplicate key 'k'");
}

TEST(SafetensorsHeaderTest, DuplicateKeyDeeplyNested) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],"
                       "\"extra\":[{\"x\":{\"y\":1,\"y\":2}}]}}",
                       1),
                 "duplicate key 'y'");
}

TEST(SafetensorsHeaderTest, EntryNotAnObject) { expect_corrupt(image("{\"a\":5}", 0), "'a' entry is not an object"); }

TEST(SafetensorsHeaderTest, MissingDtype) {
  expect_corrupt(image("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1), "'a' has no \"dtype\"");
}

TEST(SafetensorsHeaderTest, DtypeNotString) {
  expect_corrupt(image("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1), "\"dtype\" is not a string");
}

TEST(SafetensorsHeaderTest, MissingShape) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1), "'a' has no \"shape\"");
}

TEST(SafetensorsHeaderTest, ShapeNotArray) {
  expect_corrupt(image("{\"a\":" + entry("U8", "1", 0, 1) + "}", 1), "\"shape\" is not an array");
}

TEST(SafetensorsHeaderTest, ShapeDimNotInteger) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[1.5]", 0, 1) + "}", 1), "shape[0] = 1.5 is not a non-negative integer");
}

TEST(SafetensorsHeaderTest, NegativeShapeDim) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[2,-1]", 0, 1) + "}", 1), "shape[1] = -1 is negative");
}

TEST(SafetensorsHeaderTest, ShapeDimTooLarge) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[9223372036854775808]", 0, 1) + "}", 1), "is too large");
}

TEST(SafetensorsHeaderTest, NumelOverflow) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[4294967296,4294967296,16]", 0, 1) + "}", 1), "overflows");
}

TEST(SafetensorsHeaderTest, BitSizeOverflow) {
  // numel = 2^62 fits int64, but 2^62 * 64 bits does not fit 64 bits.
  expect_corrupt(image("{\"a\":" + entry("I64", "[4611686018427387904]", 0, 1) + "}", 1), "bit size");
}

TEST(SafetensorsHeaderTest, MissingDataOffsets) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1), "'a' has no \"data_offsets\"");
}

TEST(SafetensorsHeaderTest, DataOffsetsWrongArity) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1),
                 "\"data_offsets\" is not [BEGIN, END]");
}

TEST(SafetensorsHeaderTest, DataOffsetsNegative) {
  expect_corrupt(image("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1),
                 "\"data_offsets\" is not [BEGIN, END]");
}

TEST(SafetensorsHeaderTest, UnknownDtype) {
  expect_corrupt(image("{\"a\":" + entry("F33", "[1]", 0, 4) + "}", 4), "unknown dtype 'F33'");
}

TEST(SafetensorsHeaderTest, BeginAfterEnd) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[1]", 3, 2) + "}", 3), "begin > end");
}

TEST(SafetensorsHeaderTest, ByteSizeMismatch) {
  expect_corrupt(image("{\"a\":" + entry("F32", "[2]", 0, 4) + "}", 4), "span 4 bytes but F32 [2] needs 8");
}

TEST(SafetensorsHeaderTest, SubByteSizeNotWholeBytes) {
  expect_corrupt(image("{\"a\":" + entry("F4", "[3]", 0, 2) + "}", 2), "12 bits, not a whole number of bytes");
}

TEST(SafetensorsHeaderTest, FirstTensorNotAtZero) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[4]", 4, 8) + "}", 8), "first tensor 'a' [4, 8) does not start at offset 0");
}

TEST(SafetensorsHeaderTest, GapBetweenTensors) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[4]", 0, 4) + ",\"b\":" + entry("U8", "[4]", 8, 12) + "}", 12),
                 "tensors 'a' [0, 4) and 'b' [8, 12) leave a gap");
}

TEST(SafetensorsHeaderTest, OverlappingTensors) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[8]", 0, 8) + ",\"b\":" + entry("U8", "[4]", 4, 8) + "}", 8),
                 "tensors 'a' [0, 8) and 'b' [4, 8) overlap");
}

TEST(SafetensorsHeaderTest, TrailingBytesAfterLastTensor) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[4]", 0, 4) + "}", 6),
                 "tensors end at offset 4 but the data buffer has 6 bytes (trailing bytes)");
}

TEST(SafetensorsHeaderTest, MissingBytesOfLastTensor) {
  expect_corrupt(image("{\"a\":" + entry("U8", "[4]", 0, 4) + "}", 2),
                 "tensors end at offset 4 but the data buffer has 2 bytes (missing bytes)");
}

TEST(SafetensorsHeaderTest, DataWithoutTensors) { expect_corrupt(image("{}", 3), "trailing bytes"); }

TEST(SafetensorsHeaderTest, MetadataNotAnObject) {
  expect_corrupt(image("{\"__metadata__\":[\"a\"]}", 0), "\"__metadata__\" is not an object");
}

TEST(SafetensorsHeaderTest, MetadataValueNotString) {
  expect_corrupt(image("{\"__metadata__\":{\"k\":1}}", 0), "\"__metadata__\" value of 'k' is not a string");
}

// ---- The shared reference checkpoint -----------------------------------------------------

TEST(SafetensorsReferenceTest, OpensQwen3MoeTiny) {
  const char* shared = std::getenv("MOERT_SHARED_DIR");
  if (shared == nullptr) GTEST_SKIP() << "MOERT_SHARED_DIR is not set";
  const std::string path = std::string(shared) + "/reference/qwen3moe-tiny/hf/model.safetensors";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing";
  auto opened = SafetensorsFile::open(path);
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  const TensorInfo* norm = (*opened)->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->dtype, DType::kBF16);
  EXPECT_EQ(norm->shape, (Shape{256}));
  EXPECT_EQ(norm->end - norm->begin, 512u);
  EXPECT_EQ((*opened)->metadata().at("format"), "pt");
  EXPECT_GT((*opened)->tensors().size(), 10u);
}

}  // namespace
}  // namespace moert::io
