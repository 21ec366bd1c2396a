// Batched decode over paged K/V: B sequences, one query row each, all at the same context
// length. Reports the K/V bytes read per second (each (sequence, kv head) reads its K and V
// rows once per step: kv_len * KVH * Dh * 4 bytes * 2).
//   bench_paged_attention [--benchmark_filter=...]
// Args: {context, threads}. Shapes: 32 sequences, 16 q / 4 kv heads, head_dim 64, block 16.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "attention/cpu/paged_attention.h"

namespace {

using namespace moert;
using namespace moert::attention;

constexpr int kNumSeqs = 32;
constexpr int kNumHeads = 16;
constexpr int kNumKvHeads = 4;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;

void BM_PagedDecode(benchmark::State& state) {
  const int context = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int pages_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int num_blocks = kNumSeqs * pages_per_seq + 1;  // + the null block 0
  const size_t cache_floats = static_cast<size_t>(num_blocks) * kBlockSize * kNumKvHeads * kHeadDim;
  std::vector<float> k_cache(cache_floats), v_cache(cache_floats);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& x : k_cache) x = normal(rng);
  for (float& x : v_cache) x = normal(rng);
  PagedKvLayer layer{k_cache.data(), v_cache.data(), num_blocks, kBlockSize, kNumKvHeads, kHeadDim};

  // Pages in shuffled physical order, as after a while of serving.
  std::vector<int32_t> pages(static_cast<size_t>(num_blocks - 1));
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> qo_indptr(kNumSeqs + 1), kv_page_indptr(kNumSeqs + 1), last_page_len(kNumSeqs);
  for (int b = 0; b <= kNumSeqs; ++b) {
    qo_indptr[b] = b;
    kv_page_indptr[b] = b * pages_per_seq;
  }
  std::fill(last_page_len.begin(), last_page_len.end(), context - (pages_per_seq - 1) * kBlockSize);
  PagedAttentionPlan plan{kNumSeqs, qo_indptr.data(), kv_page_indptr.data(), pages.data(), last_page_len.data()};

  std::vector<float> q(static_cast<size_t>(kNumSeqs) * kNumHeads * kHeadDim), out(q.size());
  for (float& x : q) x = normal(rng);
  ThreadPool pool(threads);
  for (auto _ : state) {
    paged_attention_forward(q.data(), layer, plan, kNumHeads, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const int64_t kv_bytes = int64_t{kNumSeqs} * context * kNumKvHeads * kHeadDim * 4 * 2;
  state.SetBytesProcessed(state.iterations() * kv_bytes);
  state.counters["kv_MiB"] = static_cast<double>(kv_bytes) / (1 << 20);
}

BENCHMARK(BM_PagedDecode)
    ->ArgNames({"context", "threads"})
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({2048, 1})
    ->Args({2048, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
