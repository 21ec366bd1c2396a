// Paged attention on the CPU: against a float64 dense reference, bit for bit against
// causal_attention_one_token, invariance to batch composition / chunking / thread count,
// and the K/V slot writes and block copies.
//
// Unwritten cache slots (and the null block 0) hold NaN, so any read outside the pages and
// positions a row may attend shows up as a NaN in its output.
#include <gtest/gtest.h>

#include "tests/support/death_test.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cpu/dense_attention.h"

namespace moert::attention {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A sequence's full logical history: K/V [L, KVH, Dh] and a query per position [L, H, Dh].
struct Sequence {
  int length = 0;
  std::vector<float> k, v, q;
};

Sequence random_sequence(int length, int num_heads, int num_kv_heads, int head_dim, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Sequence s;
  s.length = length;
  s.k.resize(static_cast<size_t>(length) * num_kv_heads * head_dim);
  s.v.resize(s.k.size());
  s.q.resize(static_cast<size_t>(length) * num_heads * head_dim);
  for (float& x : s.k) x = normal(rng);
  for (float& x : s.v) x = normal(rng);
  for (float& x : s.q) x = normal(rng) * 2.0f;  // sharper softmax
  return s;
}

// A paged cache whose blocks are handed out in shuffled physical order. Block 0 is the null
// block and never handed out.
class PagedCache {
 public:
  PagedCache(int num_blocks, int block_size, int num_kv_heads, int head_dim, uint32_t seed)
      : k_(static_cast<size_t>(num_blocks) * block_size * num_kv_heads * head_dim, kNaN), v_(k_.size(), kNaN) {
    layer_ = PagedKvLayer{k_.data(), v_.data(), num_blocks, block_size, num_kv_heads, head_dim};
    free_.resize(static_cast<size_t>(num_blocks - 1));
    std::iota(free_.begin(), free_.end(), 1);
    std::mt19937 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }

  const PagedKvLayer& layer() const { return layer_; }

  // Registers a sequence; returns its id.
  int add_sequence() {
    tables_.emplace_back();
    written_.push_back(0);
    return static_cast<int>(tables_.size()) - 1;
  }

  // Appends positions [written, new_len) of `seq` through write_kv_slots, allocating pages.
  void extend(int id, const Sequence& seq, int new_len) {
    const int bs = layer_.block_size;
    const int64_t stride = static_cast<int64_t>(layer_.num_kv_heads) * layer_.head_dim;
    std::vector<int64_t> slots;
    for (int t = written_[id]; t < new_len; ++t) {
      if (t % bs == 0) {
        EXPECT_FALSE(free_.empty());
        tables_[id].push_back(free_.back());
        free_.pop_back();
      }
      slots.push_back(static_cast<int64_t>(tables_[id][t / bs]) * bs + t % bs);
    }
    write_kv_slots(layer_, seq.k.data() + written_[id] * stride, seq.v.data() + written_[id] * stride,
                   slots.data(), static_cast<int64_t>(slots.size()));
    written_[id] = new_len;
  }

  const std::vector<int32_t>& table(int id) const { return tables_[id]; }
  int written(int id) const { return written_[id]; }

 private:
  std::vector<float> k_, v_;
  PagedKvLayer layer_;
  std::vector<int32_t> free_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int> written_;
};

// One entry of a step: sequence `id` (K/V already written up to its kv_len = cache.written)
// with its last q_len positions as query rows.
struct StepEntry {
  int id;
  const Sequence* seq;
  int q_len;
};

// Runs one step; returns out [T, H, Dh] with rows in entry order.
std::vector<float> run_step(const PagedCache& cache, const std::vector<StepEntry>& entries, int num_heads,
                            ThreadPool& pool) {
  const PagedKvLayer& layer = cache.layer();
  const int dh = layer.head_dim;
  std::vector<int32_t> qo_indptr{0}, kv_page_indptr{0}, kv_page_indices, last_page_len;
  std::vector<float> q;
  for (const StepEntry& e : entries) {
    const int kv_len = cache.written(e.id);
    const int num_pages = (kv_len + layer.block_size - 1) / layer.block_size;
    const std::vector<int32_t>& table = cache.table(e.id);
    kv_page_indices.insert(kv_page_indices.end(), table.begin(), table.begin() + num_pages);
    kv_page_indptr.push_back(static_cast<int32_t>(kv_page_indices.size()));
    last_page_len.push_back(kv_len - (num_pages - 1) * layer.block_size);
    qo_indptr.push_back(qo_indptr.back() + e.q_len);
    const size_t row = static_cast<size_t>(num_heads) * dh;
    q.insert(q.end(), e.seq->q.begin() + (kv_len - e.q_len) * row, e.seq->q.begin() + kv_len * row);
  }
  PagedAttentionPlan plan{static_cast<int>(entries.size()), qo_indptr.data(), kv_page_indptr.data(),
                          kv_page_indices.data(), last_page_len.data()};
  std::vector<float> out(q.size(), kNaN);
  paged_attention_forward(q.data(), layer, plan, num_heads, out.data(), pool);
  return out;
}

// Float64 causal GQA attention of one position against a contiguous history.
void reference_row(const Sequence& s, int position, int num_heads, int num_kv_heads, int head_dim, double* out) {
  const int group = num_heads / num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  std::vector<double> scores(static_cast<size_t>(position) + 1);
  for (int h = 0; h < num_heads; ++h) {
    const float* q = s.q.data() + (static_cast<size_t>(position) * num_heads + h) * head_dim;
    const int kvh = h / group;
    double max_score = -INFINITY;
    for (int j = 0; j <= position; ++j) {
      const float* k = s.k.data() + (static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim;
      double dot = 0;
      for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      scores[j] = dot * scale;
      max_score = std::max(max_score, scores[j]);
    }
    double denominator = 0;
    for (double& x : scores) denominator += (x = std::exp(x - max_score));
    for (int d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int j = 0; j <= position; ++j)
        acc += scores[j] * s.v[(static_cast<size_t>(j) * num_kv_heads + kvh) * head_dim + d];
      out[static_cast<size_t>(h) * head_dim + d] = acc / denominator;
    }
  }
}

struct Layout {
  int num_heads, num_kv_heads, head_dim;
};

// Every (block size, head layout): a mixed batch of decode rows, whole prefills and
// chunks starting mid-sequence, context lengths on and off block boundaries.
TEST(PagedAttention, MatchesFloat64ReferenceAndDenseBitForBit) {
  // The last three reach every register blocking of the AVX-512 value accumulation: 8 heads of 64
  // (two head blocks), head_dim 96 (a 64-float block, then 32), 48 (three chunks).
  const std::vector<Layout> layouts{{4, 2, 64}, {8, 1, 16}, {2, 2, 128}, {4, 2, 16}, {16, 4, 64},
                                    {16, 2, 64}, {6, 2, 96}, {4, 1, 48}};
  // (kv_len, q_len)
  const std::vector<std::pair<int, int>> shapes{{1, 1},   {15, 15}, {16, 1},  {17, 17}, {17, 5},  {100, 1},
                                                {100, 37}, {100, 100}, {15, 1}, {16, 16}, {33, 16}, {64, 3}};
  ThreadPool pool(3);
  uint32_t seed = 10;
  for (int block_size : {1, 8, 16, 32}) {
    for (const Layout& lay : layouts) {
      SCOPED_TRACE(testing::Message() << "block_size " << block_size << " heads " << lay.num_heads << "/"
                                      << lay.num_kv_heads << " head_dim " << lay.head_dim);
      std::mt19937 rng(++seed);
      int pages_needed = 0;
      for (auto [kv_len, q_len] : shapes) pages_needed += (kv_len + block_size - 1) / block_size;
      PagedCache cache(pages_needed + 5, block_size, lay.num_kv_heads, lay.head_dim, seed);
      std::vector<Sequence> seqs;
      seqs.reserve(shapes.size());
      std::vector<StepEntry> entries;
      for (auto [kv_len, q_len] : shapes) {
        seqs.push_back(random_sequence(kv_len, lay.num_heads, lay.num_kv_heads, lay.head_dim, rng));
        const int id = cache.add_sequence();
        cache.extend(id, seqs.back(), kv_len);
        entries.push_back(StepEntry{id, &seqs.back(), q_len});
      }
      const std::vector<float> out = run_step(cache, entries, lay.num_heads, pool);

      const size_t row_floats = static_cast<size_t>(lay.num_heads) * lay.head_dim;
      std::vector<double> want(row_floats);
      std::vector<float> dense(row_floats);
      double diff = 0, norm = 0;
      size_t row = 0;
      int64_t mismatched_rows = 0;
      for (const StepEntry& e : entries) {
        const int kv_len = e.seq->length;
        for (int i = 0; i < e.q_len; ++i, ++row) {
          const int position = kv_len - e.q_len + i;
          const float* got = out.data() + row * row_floats;
          reference_row(*e.seq, position, lay.num_heads, lay.num_kv_heads, lay.head_dim, want.data());
          for (size_t x = 0; x < row_floats; ++x) {
            diff += (got[x] - want[x]) * (got[x] - want[x]);
            norm += want[x] * want[x];
          }
          causal_attention_one_token(e.seq->q.data() + static_cast<size_t>(position) * row_floats, e.seq->k.data(),
                                     e.seq->v.data(), position, lay.num_heads, lay.num_kv_heads, lay.head_dim,
                                     dense.data());
          if (std::memcmp(got, dense.data(), row_floats * sizeof(float)) != 0) ++mismatched_rows;
        }
      }
      ASSERT_EQ(row, out.size() / row_floats);
      EXPECT_LT(std::sqrt(diff / norm), 1e-5);
      EXPECT_EQ(mismatched_rows, 0) << "rows not bit-identical to causal_attention_one_token";
    }
  }
}

// The same sequence alone, inside batches with others, chunked in several ways, decoded
// token by token and with 1, 2 or 4 threads: identical bytes every time.
TEST(PagedAttention, BitIdenticalAcrossBatchCompositionChunkingAndThreads) {
  const int heads = 8, kv_heads = 2, head_dim = 64, block_size = 16, length = 77;
  std::mt19937 rng(99);
  const Sequence target = random_sequence(length, heads, kv_heads, head_dim, rng);
  std::vector<Sequence> others;
  for (int len : {5, 40, 130, 16}) others.push_back(random_sequence(len, heads, kv_heads, head_dim, rng));
  const size_t row_floats = static_cast<size_t>(heads) * head_dim;

  ThreadPool pool1(1), pool2(2), pool4(4);

  // (a) Alone: one whole-prompt prefill, one thread.
  std::vector<float> alone;
  {
    PagedCache cache(64, block_size, kv_heads, head_dim, 1);
    const int id = cache.add_sequence();
    cache.extend(id, target, length);
    alone = run_step(cache, {{id, &target, length}}, heads, pool1);
    ASSERT_EQ(alone.size(), length * row_floats);
    // Thread count does not matter.
    EXPECT_EQ(alone, run_step(cache, {{id, &target, length}}, heads, pool2));
    EXPECT_EQ(alone, run_step(cache, {{id, &target, length}}, heads, pool4));
  }

  // (b) In a batch with others before and after it (different physical pages too).
  {
    PagedCache cache(128, block_size, kv_heads, head_dim, 2);
    std::vector<int> ids;
    for (const Sequence& s : others) {
      ids.push_back(cache.add_sequence());
      cache.extend(ids.back(), s, s.length);
    }
    const int id = cache.add_sequence();
    cache.extend(id, target, length);
    const std::vector<StepEntry> entries{{ids[0], &others[0], 1},
                                         {ids[2], &others[2], 50},
                                         {id, &target, length},
                                         {ids[1], &others[1], 40},
                                         {ids[3], &others[3], 1}};
    for (ThreadPool* pool : {&pool1, &pool2, &pool4}) {
      const std::vector<float> out = run_step(cache, entries, heads, *pool);
      const size_t first_row = 1 + 50;
      EXPECT_EQ(0, std::memcmp(out.data() + first_row * row_floats, alone.data(), alone.size() * sizeof(float)))
          << pool->num_threads() << " threads";
    }
  }

  // (c) Chunked prefill (chunks start mid-sequence and mid-block), then token-by-token
  // decode, with other sequences in the batch; K/V written step by step.
  const std::vector<std::vector<int>> chunkings{{1, 10, 16, 33, 17}, {16, 16, 16, 16, 13}, {77}, {40, 1, 1, 35},
                                                {60, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}};
  for (const std::vector<int>& chunks : chunkings) {
    ASSERT_EQ(std::accumulate(chunks.begin(), chunks.end(), 0), length);
    PagedCache cache(128, block_size, kv_heads, head_dim, 3);
    const int other = cache.add_sequence();
    const int id = cache.add_sequence();
    std::vector<float> got;
    int done = 0, step = 0;
    for (int chunk : chunks) {
      cache.extend(id, target, done + chunk);
      // The companion sequence grows along in its own chunks of varying size.
      const int other_q = std::min(others[2].length - cache.written(other), 1 + (step * 7) % 13);
      std::vector<StepEntry> entries;
      if (other_q > 0) {
        cache.extend(other, others[2], cache.written(other) + other_q);
        entries.push_back({other, &others[2], other_q});
      }
      entries.push_back({id, &target, chunk});
      if (step % 2 == 1) std::reverse(entries.begin(), entries.end());
      const std::vector<float> out = run_step(cache, entries, heads, step % 3 == 0 ? pool1 : pool2);
      const size_t first_row = (step % 2 == 1 || other_q == 0) ? 0 : static_cast<size_t>(other_q);
      got.insert(got.end(), out.begin() + first_row * row_floats, out.begin() + (first_row + chunk) * row_floats);
      done += chunk;
      ++step;
    }
    ASSERT_EQ(got.size(), alone.size());
    EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), alone.size() * sizeof(float))) << "chunking #"
                                                                                      << &chunks - &chunkings[0];
  }
}

// A sequence with no rows this step is skipped; rows of q/out outside the plan are untouched.
TEST(PagedAttention, EmptyQueryRangeAndUntouchedRows) {
  const int heads = 4, kv_heads = 2, head_dim = 16, block_size = 8;
  std::mt19937 rng(5);
  const Sequence a = random_sequence(20, heads, kv_heads, head_dim, rng);
  const Sequence b = random_sequence(9, heads, kv_heads, head_dim, rng);
  PagedCache cache(16, block_size, kv_heads, head_dim, 4);
  const int ia = cache.add_sequence(), ib = cache.add_sequence();
  cache.extend(ia, a, 20);
  cache.extend(ib, b, 9);
  ThreadPool pool(2);
  const std::vector<float> ref = run_step(cache, {{ib, &b, 2}}, heads, pool);
  const std::vector<float> with_empty = run_step(cache, {{ia, &a, 0}, {ib, &b, 2}}, heads, pool);
  EXPECT_EQ(ref, with_empty);

  // qo_indptr starting past 0: rows 0 and 3 stay as they were.
  const size_t row_floats = static_cast<size_t>(heads) * head_dim;
  const std::vector<int32_t> qo_indptr{1, 3}, kv_page_indptr{0, 2}, last_page_len{1};
  const std::vector<int32_t>& table = cache.table(ib);
  PagedAttentionPlan plan{1, qo_indptr.data(), kv_page_indptr.data(), table.data(), last_page_len.data()};
  std::vector<float> q(4 * row_floats, 0.0f), out(4 * row_floats, -7.0f);
  std::copy(b.q.begin() + 7 * row_floats, b.q.begin() + 9 * row_floats, q.begin() + row_floats);
  paged_attention_forward(q.data(), cache.layer(), plan, heads, out.data(), pool);
  for (size_t x = 0; x < row_floats; ++x) {
    EXPECT_EQ(out[x], -7.0f);
    EXPECT_EQ(out[3 * row_floats + x], -7.0f);
  }
  EXPECT_EQ(0, std::memcmp(out.data() + row_floats, ref.data(), ref.size() * sizeof(float)));
}

TEST(PagedKv, WriteSlotsPlacesRowsAndSkipsPadding) {
  const int num_blocks = 4, block_size = 4, kv_heads = 2, head_dim = 3;
  const int64_t stride = kv_heads * head_dim;
  std::vector<float> kc(static_cast<size_t>(num_blocks) * block_size * stride, -1.0f), vc(kc.size(), -2.0f);
  PagedKvLayer layer{kc.data(), vc.data(), num_blocks, block_size, kv_heads, head_dim};
  const std::vector<int64_t> slots{13, -1, 2, 4};  // block 3 off 1, padding, block 0 off 2, block 1 off 0
  std::vector<float> k(slots.size() * stride), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = 1000.0f + static_cast<float>(i);
  }
  write_kv_slots(layer, k.data(), v.data(), slots.data(), static_cast<int64_t>(slots.size()));
  std::vector<float> want_k(kc.size(), -1.0f), want_v(vc.size(), -2.0f);
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    const int64_t block = slots[t] / block_size, offset = slots[t] % block_size;
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        const size_t at = static_cast<size_t>(((block * block_size + offset) * kv_heads + h) * head_dim + d);
        want_k[at] = k[t * stride + h * head_dim + d];
        want_v[at] = v[t * stride + h * head_dim + d];
      }
    }
  }
  EXPECT_EQ(kc, want_k);
  EXPECT_EQ(vc, want_v);
}

TEST(PagedKv, CopyBlocksCopiesWholeBlocksInOrder) {
  const int num_blocks = 5, block_size = 3, kv_heads = 2, head_dim = 4;
  const size_t block_floats = static_cast<size_t>(block_size) * kv_heads * head_dim;
  std::vector<float> kc(num_blocks * block_floats), vc(kc.size());
  for (size_t i = 0; i < kc.size(); ++i) {
    kc[i] = static_cast<float>(i);
    vc[i] = -static_cast<float>(i);
  }
  PagedKvLayer layer{kc.data(), vc.data(), num_blocks, block_size, kv_heads, head_dim};
  auto block = [&](const std::vector<float>& c, int b) {
    return std::vector<float>(c.begin() + b * block_floats, c.begin() + (b + 1) * block_floats);
  };
  const std::vector<float> k1 = block(kc, 1), v1 = block(vc, 1), k4 = block(kc, 4), v4 = block(vc, 4);
  const std::vector<float> k0 = block(kc, 0), v0 = block(vc, 0);
  // 1 -> 2, then 2 -> 3 (sees the new block 2), 4 -> 4 (no-op).
  const std::vector<int32_t> src{1, 2, 4}, dst{2, 3, 4};
  copy_kv_blocks(layer, src.data(), dst.data(), 3);
  EXPECT_EQ(block(kc, 0), k0);
  EXPECT_EQ(block(vc, 0), v0);
  EXPECT_EQ(block(kc, 1), k1);
  EXPECT_EQ(block(kc, 2), k1);
  EXPECT_EQ(block(vc, 2), v1);
  EXPECT_EQ(block(kc, 3), k1);
  EXPECT_EQ(block(vc, 3), v1);
  EXPECT_EQ(block(kc, 4), k4);
  EXPECT_EQ(block(vc, 4), v4);
}

// Copy-on-write as the engine uses it: a forked sequence copies the shared last block, then
// both append different tokens; each attends exactly its own history.
TEST(PagedKv, CopyOnWriteForkAttendsOwnHistory) {
  const int heads = 4, kv_heads = 2, head_dim = 16, block_size = 8;
  std::mt19937 rng(8);
  Sequence parent = random_sequence(13, heads, kv_heads, head_dim, rng);
  Sequence child = parent;
  const Sequence tail = random_sequence(2, heads, kv_heads, head_dim, rng);
  const size_t kv_row = static_cast<size_t>(kv_heads) * head_dim, q_row = static_cast<size_t>(heads) * head_dim;
  // The child diverges at positions 13, 14.
  for (Sequence* s : {&parent, &child}) {
    s->length = 15;
    s->k.resize(15 * kv_row);
    s->v.resize(15 * kv_row);
    s->q.resize(15 * q_row);
  }
  std::normal_distribution<float> normal;
  for (size_t i = 13 * kv_row; i < 15 * kv_row; ++i) {
    parent.k[i] = normal(rng), parent.v[i] = normal(rng);
    child.k[i] = tail.k[i - 13 * kv_row], child.v[i] = tail.v[i - 13 * kv_row];
  }
  for (size_t i = 13 * q_row; i < 15 * q_row; ++i) parent.q[i] = child.q[i] = normal(rng);

  std::vector<float> kc(8 * block_size * kv_row, kNaN), vc(kc.size(), kNaN);
  PagedKvLayer layer{kc.data(), vc.data(), 8, block_size, kv_heads, head_dim};
  // Parent pages {5, 2}; positions 0..12 written once.
  std::vector<int64_t> slots;
  for (int t = 0; t < 13; ++t) slots.push_back((t < 8 ? 5 : 2) * block_size + t % 8);
  write_kv_slots(layer, parent.k.data(), parent.v.data(), slots.data(), 13);
  // Fork: child shares page 5, copies page 2 into 6, then both write their own tokens.
  const int32_t src = 2, dst = 6;
  copy_kv_blocks(layer, &src, &dst, 1);
  const int64_t parent_slots[2] = {2 * block_size + 5, 2 * block_size + 6};
  const int64_t child_slots[2] = {6 * block_size + 5, 6 * block_size + 6};
  write_kv_slots(layer, parent.k.data() + 13 * kv_row, parent.v.data() + 13 * kv_row, parent_slots, 2);
  write_kv_slots(layer, child.k.data() + 13 * kv_row, child.v.data() + 13 * kv_row, child_slots, 2);

  const std::vector<int32_t> qo_indptr{0, 2, 4}, kv_page_indptr{0, 2, 4}, pages{5, 2, 5, 6}, last{7, 7};
  std::vector<float> q(4 * q_row), out(q.size());
  std::copy(parent.q.begin() + 13 * q_row, parent.q.end(), q.begin());
  std::copy(child.q.begin() + 13 * q_row, child.q.end(), q.begin() + 2 * q_row);
  PagedAttentionPlan plan{2, qo_indptr.data(), kv_page_indptr.data(), pages.data(), last.data()};
  ThreadPool pool(2);
  paged_attention_forward(q.data(), layer, plan, heads, out.data(), pool);
  std::vector<float> dense(q_row);
  for (int r = 0; r < 4; ++r) {
    const Sequence& s = r < 2 ? parent : child;
    const int position = 13 + r % 2;
    causal_attention_one_token(s.q.data() + position * q_row, s.k.data(), s.v.data(), position, heads, kv_heads,
                               head_dim, dense.data());
    EXPECT_EQ(0, std::memcmp(out.data() + r * q_row, dense.data(), q_row * sizeof(float))) << "row " << r;
  }
}

// Plan validation names the offending value.
TEST(PagedAttentionDeathTest, ValidatesPlan) {
  const int heads = 2, kv_heads = 1, head_dim = 4, block_size = 4, num_blocks = 4;
  std::vector<float> kc(num_blocks * block_size * kv_heads * head_dim, 0.5f), vc(kc.size(), 0.5f);
  PagedKvLayer layer{kc.data(), vc.data(), num_blocks, block_size, kv_heads, head_dim};
  std::vector<float> q(8 * heads * head_dim, 0.1f), out(q.size());
  ThreadPool pool(1);
  auto run = [&](std::vector<int32_t> qo, std::vector<int32_t> kvp, std::vector<int32_t> pages,
                 std::vector<int32_t> last) {
    PagedAttentionPlan plan{static_cast<int>(last.size()), qo.data(), kvp.data(), pages.data(), last.data()};
    paged_attention_forward(q.data(), layer, plan, heads, out.data(), pool);
  };
  run({0, 1}, {0, 2}, {1, 3}, {4});  // valid
  MOERT_EXPECT_DEATH(run({0, 1}, {0, 1}, {1}, {0}), "kv_last_page_len\\[0\\] = 0");
  MOERT_EXPECT_DEATH(run({0, 1, 2}, {0, 1, 2}, {1, 2}, {1, 5}), "kv_last_page_len\\[1\\] = 5");
  MOERT_EXPECT_DEATH(run({0, 1}, {0, 2}, {1, 0}, {2}), "kv_page_indices\\[1\\] = 0");
  MOERT_EXPECT_DEATH(run({0, 1}, {0, 1}, {4}, {2}), "kv_page_indices\\[0\\] = 4");
  MOERT_EXPECT_DEATH(run({0, 6}, {0, 1}, {1}, {3}), "q_len = 6 must be <= kv_len = 3");
  MOERT_EXPECT_DEATH(run({0, 2, 1}, {0, 1, 2}, {1, 2}, {3, 3}), "qo_indptr\\[2\\] = 1");
  MOERT_EXPECT_DEATH(run({0, 1}, {0, 0}, {1}, {1}), "sequence 0 has 0 pages");
  PagedAttentionPlan plan{1, nullptr, nullptr, nullptr, nullptr};
  MOERT_EXPECT_DEATH(paged_attention_forward(q.data(), layer, plan, 0, out.data(), pool), "num_heads = 0");

  const float row[4] = {0, 0, 0, 0};
  const int64_t bad_slot = num_blocks * block_size;
  MOERT_EXPECT_DEATH(write_kv_slots(layer, row, row, &bad_slot, 1), "slots\\[0\\] = 16");
  const int32_t good = 1, bad = 4;
  MOERT_EXPECT_DEATH(copy_kv_blocks(layer, &good, &bad, 1), "dst\\[0\\] = 4");
  MOERT_EXPECT_DEATH(copy_kv_blocks(layer, &bad, &good, 1), "src\\[0\\] = 4");
}

}  // namespace
}  // namespace moert::attention
