#include "runtime/engine/kv_cache_eval.h"

#include <string>

#include "runtime/runner/model_runner.h"

namespace moert::engine {
namespace {

// Logits [L, V] of every position of `tokens`: a prefill chunk over the first half, then one
// decode step per remaining token, through a fresh cache of `dtype`. Blocks 1..n in order.
Result<std::vector<float>> paged_logits(const TransformerForward& model, DType dtype, int block_size,
                                        const std::vector<int32_t>& tokens) {
  const int64_t length = static_cast<int64_t>(tokens.size());
  const int num_pages = static_cast<int>((length + block_size - 1) / block_size);
  const int num_groups = static_cast<int>(runner::kv_group_layouts(model.config()).size());
  MOERT_ASSIGN_OR_RETURN(std::unique_ptr<runner::PagedModelRunner> runner,
                         runner::PagedModelRunner::create(model, {num_groups * num_pages + 1, block_size, dtype, 1}));
  const bool recurrent = !runner::recurrent_state_layout(model.config()).layers.empty();
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(num_groups));  // group g: its own blocks
  for (int g = 0; g < num_groups; ++g) {
    for (int i = 0; i < num_pages; ++i) tables[static_cast<size_t>(g)].push_back(g * num_pages + i + 1);
  }
  const int64_t prefill = (length + 1) / 2;
  std::vector<float> logits;
  for (int64_t start = 0; start < length;) {
    const int64_t size = start == 0 ? prefill : 1;
    runner::SequenceChunk chunk;
    chunk.start = start;
    chunk.tokens.assign(tokens.begin() + start, tokens.begin() + start + size);
    chunk.num_logit_rows = static_cast<int>(size);
    for (const std::vector<int32_t>& table : tables) {
      chunk.block_tables.emplace_back(table.begin(), table.begin() + (start + size + block_size - 1) / block_size);
    }
    runner::RunnerBatch batch{{}, {}};
    if (recurrent) {  // one slot, zeroed before the first chunk (the state is F32 at every KV dtype)
      chunk.state_slot = 0;
      if (start == 0) batch.state_ops.push_back({attention::kNoSlot, 0});
    }
    batch.chunks.push_back(std::move(chunk));
    MOERT_ASSIGN_OR_RETURN(std::vector<float> rows, runner->run(batch));
    logits.insert(logits.end(), rows.begin(), rows.end());
    start += size;
  }
  return logits;
}

}  // namespace

Result<DistributionComparison> compare_kv_cache_dtype(const TransformerForward& model, DType dtype,
                                                      const std::vector<std::vector<int32_t>>& sequences,
                                                      int block_size) {
  const int vocab = model.config().vocab_size;
  DistributionComparison comparison;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t>& tokens = sequences[s];
    if (tokens.empty()) return invalid_argument("sequence " + std::to_string(s) + " is empty");
    for (int32_t token : tokens) {
      if (token < 0 || token >= vocab) {
        return invalid_argument("sequence " + std::to_string(s) + ": token " + std::to_string(token) +
                                " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
      }
    }
    MOERT_ASSIGN_OR_RETURN(std::vector<float> reference, paged_logits(model, DType::kF32, block_size, tokens));
    MOERT_ASSIGN_OR_RETURN(std::vector<float> candidate, paged_logits(model, dtype, block_size, tokens));
    compare_logit_rows(reference.data(), candidate.data(), static_cast<int64_t>(tokens.size()), vocab, &comparison);
  }
  return comparison;
}

}  // namespace moert::engine
