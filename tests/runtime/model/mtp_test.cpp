// The DeepSeek multi-token prediction layer (docs/mtp.md) against the shared float64
// reference (shared/reference/deepseekv3-tiny-mtp): teacher-forced MTP logits within 1e-4
// relative L2 per row and the same argmaxes; the main model unchanged by loading it; the
// rows computed prefix by prefix through the MTP's own cache equal the teacher-forced ones.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/io/npy.h"
#include "runtime/model/reference_forward.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

constexpr double kMaxRelativeError = 1e-4;

std::string mtp_case_dir() {
  const std::string dir = testing::shared_dir() + "/reference/deepseekv3-tiny-mtp";
  return testing::shared_dir().empty() || !std::filesystem::exists(dir + "/hf") ? "" : dir;
}

std::vector<int32_t> reference_sequence(const nlohmann::json& ref) {
  std::vector<int32_t> sequence = ref.at("prompt_tokens").get<std::vector<int32_t>>();
  for (const auto& t : ref.at("gen_tokens")) sequence.push_back(t.get<int32_t>());
  return sequence;
}

TEST(Mtp, TeacherForcedLogitsMatchTheFloat64Reference) {
  const std::string dir = mtp_case_dir();
  if (dir.empty()) GTEST_SKIP() << "no shared deepseekv3-tiny-mtp case";
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir + "/hf", LoadOptions{.mtp = true});
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ASSERT_EQ((*model)->weights.mtp.size(), 1u);
  ASSERT_EQ((*model)->weights.layers.size(), static_cast<size_t>((*model)->config.num_layers + 1));
  const nlohmann::json ref = nlohmann::json::parse(testing::read_file(dir + "/ref.json"));
  const std::vector<int32_t> sequence = reference_sequence(ref);
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward forward((*model)->config, (*model)->weights, cpu);
  Result<std::vector<float>> logits = mtp_teacher_forced_logits(forward, sequence);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  Result<io::NpyArray> expected = io::read_npy(dir + "/ref.mtp_logits.npy");
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  const int64_t rows = static_cast<int64_t>(sequence.size()) - 1, vocab = (*model)->config.vocab_size;
  ASSERT_EQ(expected->shape, (Shape{rows, vocab}));
  ASSERT_EQ(static_cast<int64_t>(logits->size()), rows * vocab);
  const std::vector<int32_t> expected_tokens = ref.at("mtp_tokens").get<std::vector<int32_t>>();
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const double error = testing::relative_l2_error(logits->data() + r * vocab, expected->values.data() + r * vocab, vocab);
    EXPECT_LT(error, kMaxRelativeError) << "MTP row " << r;
    worst = std::max(worst, error);
    EXPECT_EQ(argmax_lowest_index(logits->data() + r * vocab, vocab), expected_tokens[static_cast<size_t>(r)]) << r;
  }
  std::printf("deepseekv3-tiny-mtp: MTP logits max relative L2 error per row %.3g\n", worst);
}

TEST(Mtp, LoadingItLeavesTheMainModelBitIdentical) {
  const std::string dir = mtp_case_dir();
  if (dir.empty()) GTEST_SKIP() << "no shared deepseekv3-tiny-mtp case";
  Result<std::unique_ptr<LoadedModel>> with = load_model(dir + "/hf", LoadOptions{.mtp = true});
  Result<std::unique_ptr<LoadedModel>> without = load_model(dir + "/hf");
  ASSERT_TRUE(with.is_ok() && without.is_ok());
  EXPECT_TRUE((*without)->weights.mtp.empty());
  EXPECT_EQ((*without)->weights.layers.size(), static_cast<size_t>((*without)->config.num_layers));
  const std::vector<int32_t> prompt = {84, 464, 280, 117, 397, 107, 275, 114};
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward a((*with)->config, (*with)->weights, cpu), b((*without)->config, (*without)->weights, cpu);
  DenseKvCache cache_a = a.new_cache(), cache_b = b.new_cache();
  Result<std::vector<float>> la = a.forward(cache_a, prompt), lb = b.forward(cache_b, prompt);
  ASSERT_TRUE(la.is_ok() && lb.is_ok());
  ASSERT_EQ(la->size(), lb->size());
  EXPECT_EQ(0, std::memcmp(la->data(), lb->data(), la->size() * sizeof(float)));
  // forward_with_hidden returns the same logits.
  ForwardBatch batch;
  batch.tokens = prompt;
  for (size_t t = 0; t < prompt.size(); ++t) {
    batch.positions.push_back(static_cast<int64_t>(t));
    batch.logit_rows.push_back(static_cast<int64_t>(t));
  }
  DenseKvCache cache_c = a.new_cache();
  std::vector<float> hidden;
  Result<std::vector<float>> lc = a.transformer().forward_with_hidden(batch, cache_c, &hidden);
  ASSERT_TRUE(lc.is_ok());
  EXPECT_EQ(hidden.size(), prompt.size() * static_cast<size_t>((*with)->config.hidden_size));
  EXPECT_EQ(0, std::memcmp(la->data(), lc->data(), la->size() * sizeof(float)));
}

// What a speculative decoder does: the MTP rows appended a few at a time through the MTP's
// own cache give the teacher-forced rows bit for bit (row i depends on rows <= i only).
TEST(Mtp, RowsAppendedThroughItsCacheEqualTheTeacherForcedRows) {
  const std::string dir = mtp_case_dir();
  if (dir.empty()) GTEST_SKIP() << "no shared deepseekv3-tiny-mtp case";
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir + "/hf", LoadOptions{.mtp = true});
  ASSERT_TRUE(model.is_ok());
  const nlohmann::json ref = nlohmann::json::parse(testing::read_file(dir + "/ref.json"));
  const std::vector<int32_t> sequence = reference_sequence(ref);
  const int64_t n = static_cast<int64_t>(sequence.size()), vocab = (*model)->config.vocab_size;
  const int64_t dim = (*model)->config.hidden_size;
  ThreadPool pool(2);
  backend::CpuBackend cpu(pool);
  ReferenceForward forward((*model)->config, (*model)->weights, cpu);
  Result<std::vector<float>> whole = mtp_teacher_forced_logits(forward, sequence);
  ASSERT_TRUE(whole.is_ok());
  // g for every position, then the MTP rows in pieces of 1, 2 and 3.
  ForwardBatch all;
  all.tokens = sequence;
  for (int64_t t = 0; t < n; ++t) all.positions.push_back(t);
  all.logit_rows = {n - 1};
  DenseKvCache main_cache = forward.new_cache(), mtp_cache = forward.new_cache();
  std::vector<float> hidden;
  ASSERT_TRUE(forward.transformer().forward_with_hidden(all, main_cache, &hidden).is_ok());
  std::vector<float> stitched;
  for (int64_t begin = 0, step = 1; begin < n - 1; begin += step, step = step % 3 + 1) {
    const int64_t end = std::min(n - 1, begin + step);
    ForwardBatch rows;
    for (int64_t i = begin; i < end; ++i) {
      rows.tokens.push_back(sequence[static_cast<size_t>(i + 1)]);
      rows.positions.push_back(i);
      rows.logit_rows.push_back(i - begin);
    }
    Result<std::vector<float>> part =
        forward.transformer().mtp_forward(0, rows, host_ptr(hidden.data() + begin * dim), mtp_cache, nullptr);
    ASSERT_TRUE(part.is_ok()) << part.status().to_string();
    mtp_cache.advance(end - begin);
    stitched.insert(stitched.end(), part->begin(), part->end());
  }
  ASSERT_EQ(stitched.size(), static_cast<size_t>((n - 1) * vocab));
  EXPECT_EQ(0, std::memcmp(stitched.data(), whole->data(), stitched.size() * sizeof(float)));
}

TEST(Mtp, AModelWithoutItIsRefusedByName) {
  testing::ScratchDir scratch("mtp-absent");
  const std::string dir = testing::write_generated_model(scratch / "m", "deepseek_v3", "bf16", {}, 1);
  Result<std::unique_ptr<LoadedModel>> model = load_model(dir, LoadOptions{.mtp = true});
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find("no multi-token prediction layer (config.json num_nextn_predict_layers = 0)"),
            std::string::npos)
      << model.status().to_string();
}

}  // namespace
}  // namespace moert
