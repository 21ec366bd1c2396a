#include "runtime/io/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "tests/support/fifo_watchdog.h"

namespace moert::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/moert_checkpoint_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    // Six 64-byte tensors of mixed dtypes.
    add("layers.0.w", DType::kF32, {4, 4});
    add("layers.0.b", DType::kBF16, {32});
    add("layers.1.w", DType::kF32, {16});
    add("layers.1.b", DType::kU8, {64});
    add("embed", DType::kI64, {8});
    add("norm", DType::kF16, {2, 16});
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void add(const std::string& name, DType dtype, Shape shape) {
    names_.push_back(name);
    auto& bytes = storage_.emplace_back(*dtype_storage_bytes(dtype, static_cast<uint64_t>(shape_numel(shape))));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(names_.size() * 31 + i);
    tensors_.push_back({name, TensorView::contiguous(dtype, std::move(shape), bytes.data())});
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  void write_text(const std::string& name, const std::string& text) const {
    std::ofstream out(path(name), std::ios::binary);
    out << text;
  }
  json read_index() const {
    std::ifstream in(path(kIndexFileName));
    return json::parse(in);
  }
  void write_index(const json& index) const { write_text(kIndexFileName, index.dump()); }

  // Writes the fixture tensors as 3 shards of two tensors each.
  void write_three_shards() const { ASSERT_TRUE(write_sharded_checkpoint(dir_.string(), tensors_, 128).is_ok()); }

  void expect_matches_fixture(const Checkpoint& checkpoint) const {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      auto view = checkpoint.get(names_[i]);
      ASSERT_TRUE(view.is_ok()) << view.status().to_string();
      EXPECT_EQ(view->dtype, tensors_[i].view.dtype) << names_[i];
      EXPECT_EQ(view->shape, tensors_[i].view.shape) << names_[i];
      EXPECT_EQ(std::memcmp(view->data, storage_[i].data(), storage_[i].size()), 0) << names_[i];
      const TensorInfo* info = checkpoint.find(names_[i]);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(info->name, names_[i]);
    }
  }

  static void expect_status(const Status& status, StatusCode code, const std::string& needle) {
    EXPECT_EQ(status.code(), code) << status.to_string();
    EXPECT_NE(status.message().find(needle), std::string::npos) << "'" << needle << "' not in: " << status.message();
  }

  fs::path dir_;
  std::vector<std::string> names_;
  std::vector<std::vector<uint8_t>> storage_;
  std::vector<NamedTensor> tensors_;
};

TEST_F(CheckpointTest, SingleFileCheckpoint) {
  ASSERT_TRUE(write_safetensors(path(kSingleFileName), tensors_).is_ok());
  auto checkpoint = Checkpoint::open(dir_.string());
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  expect_matches_fixture(*checkpoint);
  EXPECT_EQ(checkpoint->shards().size(), 1u);
  EXPECT_EQ(checkpoint->total_bytes(), 6u * 64u);
  std::vector<std::string> sorted = names_;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(checkpoint->tensor_names(), sorted);
  EXPECT_EQ(checkpoint->find("absent"), nullptr);
}

TEST_F(CheckpointTest, ShardedRoundTripWithThreeShards) {
  write_three_shards();
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors"}) {
    EXPECT_TRUE(fs::exists(path(shard))) << shard;
  }
  EXPECT_FALSE(fs::exists(path("model-00004-of-00003.safetensors")));
  const json index = read_index();
  EXPECT_EQ(index["metadata"]["total_size"], 6 * 64);
  // Split in the given order, two 64-byte tensors per 128-byte shard.
  EXPECT_EQ(index["weight_map"]["layers.0.w"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.0.b"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.1.w"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["layers.1.b"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["embed"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["norm"], "model-00003-of-00003.safetensors");

  auto checkpoint = Checkpoint::open(dir_.string());
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  EXPECT_EQ(checkpoint->shards().size(), 3u);
  EXPECT_EQ(checkpoint->total_bytes(), 6u * 64u);
  EXPECT_EQ(checkpoint->tensor_names().size(), 6u);
  // Moving the checkpoint keeps its views and infos valid.
  Checkpoint moved = std::move(checkpoint).value();
  expect_matches_fixture(moved);
}

TEST_F(CheckpointTest, LargeTensorGetsItsOwnShard) {
  std::vector<uint8_t> small(10), big(100);
  const std::vector<NamedTensor> tensors = {
      {"a", TensorView::contiguous(DType::kU8, {10}, small.data())},
      {"big", TensorView::contiguous(DType::kU8, {100}, big.data())},
      {"c", TensorView::contiguous(DType::kU8, {10}, small.data())},
      {"d", TensorView::contiguous(DType::kU8, {10}, small.data())},
  };
  ASSERT_TRUE(write_sharded_checkpoint(dir_.string(), tensors, 50).is_ok());
  const json index = read_index();
  EXPECT_EQ(index["weight_map"]["a"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["c"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["d"], "model-00003-of-00003.safetensors");
  auto checkpoint = Checkpoint::open(dir_.string());
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  EXPECT_EQ(checkpoint->total_bytes(), 130u);
}

TEST_F(CheckpointTest, OneShardStillWritesIndexAndCreatesDir) {
  const std::string nested = (dir_ / "a" / "b").string();
  ASSERT_TRUE(write_sharded_checkpoint(nested, tensors_, 1 << 20).is_ok());
  EXPECT_TRUE(fs::exists(nested + "/model-00001-of-00001.safetensors"));
  EXPECT_TRUE(fs::exists(nested + "/" + kIndexFileName));
  EXPECT_FALSE(fs::exists(nested + "/" + kSingleFileName));
  auto checkpoint = Checkpoint::open(nested);
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  expect_matches_fixture(*checkpoint);
}

TEST_F(CheckpointTest, WriterRejectsDuplicateNames) {
  std::vector<NamedTensor> twice = {tensors_[0], tensors_[0]};
  expect_status(write_sharded_checkpoint(dir_.string(), twice, 1 << 20), StatusCode::kInvalidArgument, "appears twice");
}

TEST_F(CheckpointTest, IndexWithoutMetadataIsAccepted) {
  write_three_shards();
  json index = read_index();
  index.erase("metadata");
  write_index(index);
  auto checkpoint = Checkpoint::open(dir_.string());
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  index["metadata"] = json::object();
  write_index(index);
  ASSERT_TRUE(Checkpoint::open(dir_.string()).is_ok());
}

TEST_F(CheckpointTest, GetMissingTensorIsNotFound) {
  write_three_shards();
  auto checkpoint = Checkpoint::open(dir_.string());
  ASSERT_TRUE(checkpoint.is_ok());
  expect_status(checkpoint->get("nope").status(), StatusCode::kNotFound,
                "tensor 'nope' not found in checkpoint " + dir_.string());
}

TEST_F(CheckpointTest, EmptyDirIsNotFound) {
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kNotFound, "no checkpoint in " + dir_.string());
}

TEST_F(CheckpointTest, IndexNotJson) {
  write_three_shards();
  write_text(kIndexFileName, "{\"weight_map\": {");
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "index is not valid JSON");
}

TEST_F(CheckpointTest, IndexNotAnObject) {
  write_three_shards();
  write_text(kIndexFileName, "[1, 2]");
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "index is not a JSON object");
}

TEST_F(CheckpointTest, IndexWithoutWeightMap) {
  write_three_shards();
  write_index({{"metadata", {{"total_size", 384}}}});
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "index has no \"weight_map\"");
}

TEST_F(CheckpointTest, WeightMapNotAnObject) {
  write_three_shards();
  write_index({{"weight_map", json::array({"a"})}});
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "\"weight_map\" is not an object");
}

TEST_F(CheckpointTest, WeightMapValueNotString) {
  write_three_shards();
  json index = read_index();
  index["weight_map"]["embed"] = 3;
  write_index(index);
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt,
                "weight_map entry of tensor 'embed' is not a string");
}

TEST_F(CheckpointTest, MetadataNotAnObject) {
  write_three_shards();
  json index = read_index();
  index["metadata"] = "big";
  write_index(index);
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "\"metadata\" is not an object");
}

TEST_F(CheckpointTest, ShardNameOutsideDir) {
  write_three_shards();
  json index = read_index();
  index["weight_map"]["embed"] = "../model-00003-of-00003.safetensors";
  write_index(index);
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt, "not a file name inside");
}

TEST_F(CheckpointTest, MissingShardFile) {
  write_three_shards();
  fs::remove(path("model-00002-of-00003.safetensors"));
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kNotFound,
                "shard model-00002-of-00003.safetensors does not exist");
}

TEST_F(CheckpointTest, TensorMappedToShardThatLacksIt) {
  write_three_shards();
  json index = read_index();
  index["weight_map"]["embed"] = "model-00001-of-00003.safetensors";
  write_index(index);
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt,
                "tensor 'embed' is mapped to shard model-00001-of-00003.safetensors, whose header lacks it");
}

TEST_F(CheckpointTest, IndexNamesTensorAbsentEverywhere) {
  write_three_shards();
  json index = read_index();
  index["weight_map"]["ghost"] = "model-00002-of-00003.safetensors";
  write_index(index);
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt,
                "tensor 'ghost' is mapped to shard model-00002-of-00003.safetensors");
}

TEST_F(CheckpointTest, TensorInTwoShards) {
  ASSERT_TRUE(write_safetensors(path("s1.safetensors"), {tensors_[0], tensors_[1]}).is_ok());
  ASSERT_TRUE(write_safetensors(path("s2.safetensors"), {tensors_[1], tensors_[2]}).is_ok());
  write_index({{"weight_map",
                {{names_[0], "s1.safetensors"}, {names_[1], "s1.safetensors"}, {names_[2], "s2.safetensors"}}}});
  expect_status(Checkpoint::open(dir_.string()).status(), StatusCode::kCorrupt,
                "tensor '" + names_[1] + "' is in both shard s1.safetensors and shard s2.safetensors");
}

TEST_F(CheckpointTest, CorruptShardIsReported) {
  write_three_shards();
  const std::string shard = path("model-00003-of-00003.safetensors");
  fs::resize_file(shard, fs::file_size(shard) - 1);
  const Status status = Checkpoint::open(dir_.string()).status();
  expect_status(status, StatusCode::kCorrupt, "model-00003-of-00003.safetensors");
}

// Files that are not files (docs/files.md): a shard or an index that is a FIFO is refused at
// once instead of blocking the load, an index linked to /dev/zero is refused instead of read
// until the memory runs out, and shards reached through symbolic links (a Hugging Face cache)
// still open.
TEST_F(CheckpointTest, ShardsAndIndexMustBeRegularFiles) {
  write_three_shards();
  const std::string shard = path("model-00002-of-00003.safetensors");
  fs::rename(shard, path("blob"));
  fs::create_symlink("blob", shard);
  ASSERT_TRUE(Checkpoint::open(dir_.string()).is_ok());

  fs::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  Status status;
  EXPECT_TRUE(testing::returns_without_blocking_on_fifo([&] { status = Checkpoint::open(dir_.string()).status(); }, shard));
  EXPECT_EQ(status.message(), shard + " is not a regular file (a FIFO)");
  fs::remove(shard);
  fs::rename(path("blob"), shard);

  const std::string index = path(kIndexFileName);
  fs::rename(index, path("index-blob"));
  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  EXPECT_TRUE(testing::returns_without_blocking_on_fifo([&] { status = Checkpoint::open(dir_.string()).status(); }, index));
  EXPECT_EQ(status.message(), index + " is not a regular file (a FIFO)");
  fs::remove(index);
  fs::create_symlink("/dev/zero", index);
  EXPECT_EQ(Checkpoint::open(dir_.string()).status().message(), index + " is not a regular file (a character device)");
  fs::remove(index);
  fs::rename(path("index-blob"), index);
  EXPECT_TRUE(Checkpoint::open(dir_.string()).is_ok());
}

TEST(CheckpointReferenceTest, OpensQwen3MoeTinyDir) {
  const char* shared = std::getenv("MOERT_SHARED_DIR");
  if (shared == nullptr) GTEST_SKIP() << "MOERT_SHARED_DIR is not set";
  const std::string dir = std::string(shared) + "/reference/qwen3moe-tiny/hf";
  if (!fs::exists(dir + "/model.safetensors")) GTEST_SKIP() << dir << " has no model.safetensors";
  auto checkpoint = Checkpoint::open(dir);
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().to_string();
  auto norm = checkpoint->get("model.norm.weight");
  ASSERT_TRUE(norm.is_ok()) << norm.status().to_string();
  EXPECT_EQ(norm->dtype, DType::kBF16);
  EXPECT_EQ(norm->shape, (Shape{256}));
  EXPECT_GT(checkpoint->total_bytes(), 0u);
}

}  // namespace
}  // namespace moert::io
