// Decode over paged K/V: B sequences, one query row each, all at the same context length.
// Reports the K/V bytes read per second (each (sequence, kv head) reads its K and V rows once
// per step: kv_len * KVH * Dh * 4 bytes * 2) and ns per (key, query head).
//   bench_paged_attention [--benchmark_filter=...]
// Args: {seqs, context, threads, bf16 cache (0: F32, 1: BF16)}. Shapes: 16 q / 4 kv heads, head_dim 64, block 16. One sequence
// is batch-1 decode at a long context (its K/V stay in the last-level cache between steps), 32
// sequences a batched step whose K/V come from memory.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "core/tensor.h"
#include "quant/bf16.h"

namespace {

using namespace moert;
using namespace moert::attention;

constexpr int kNumHeads = 16;
constexpr int kNumKvHeads = 4;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;

void BM_PagedDecode(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const DType dtype = state.range(3) != 0 ? DType::kBF16 : DType::kF32;
  const int pages_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int num_blocks = num_seqs * pages_per_seq + 1;  // + the null block 0
  // Allocated as the engine allocates its KV pool (core/tensor.h: huge pages advised).
  const Shape cache_shape{num_blocks, kBlockSize, kNumKvHeads, kHeadDim};
  Buffer k_cache(dtype, cache_shape), v_cache(dtype, cache_shape);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (Buffer* cache : {&k_cache, &v_cache}) {
    for (int64_t i = 0; i < shape_numel(cache_shape); ++i) {
      if (dtype == DType::kF32) {
        cache->data<float>()[i] = normal(rng);
      } else {
        cache->data<uint16_t>()[i] = quant::f32_to_bf16(normal(rng));
      }
    }
  }
  PagedKvLayer layer{k_cache.view().data, v_cache.view().data, num_blocks, kBlockSize, kNumKvHeads, kHeadDim, dtype};

  // Pages in shuffled physical order, as after a while of serving.
  std::vector<int32_t> pages(static_cast<size_t>(num_blocks - 1));
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int32_t> qo_indptr(num_seqs + 1), kv_page_indptr(num_seqs + 1), last_page_len(num_seqs);
  for (int b = 0; b <= num_seqs; ++b) {
    qo_indptr[b] = b;
    kv_page_indptr[b] = b * pages_per_seq;
  }
  std::fill(last_page_len.begin(), last_page_len.end(), context - (pages_per_seq - 1) * kBlockSize);
  PagedAttentionPlan plan{num_seqs, qo_indptr.data(), kv_page_indptr.data(), pages.data(), last_page_len.data()};

  std::vector<float> q(static_cast<size_t>(num_seqs) * kNumHeads * kHeadDim), out(q.size());
  for (float& x : q) x = normal(rng);
  ThreadPool pool(threads);
  for (auto _ : state) {
    paged_attention_forward(q.data(), layer, plan, kNumHeads, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const int64_t kv_bytes = int64_t{num_seqs} * context * kNumKvHeads * kHeadDim * kv_element_bytes(dtype) * 2;
  state.SetBytesProcessed(state.iterations() * kv_bytes);
  state.counters["kv_MiB"] = static_cast<double>(kv_bytes) / (1 << 20);
  const double key_heads = static_cast<double>(state.iterations()) * num_seqs * context * kNumHeads;
  state.counters["s_per_key_head"] =
      benchmark::Counter(key_heads, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK(BM_PagedDecode)
    ->ArgNames({"seqs", "context", "threads", "bf16"})
    ->Args({1, 2048, 1, 0})
    ->Args({1, 2048, 2, 0})
    ->Args({1, 8192, 2, 0})
    ->Args({32, 512, 1, 0})
    ->Args({32, 512, 2, 0})
    ->Args({32, 2048, 1, 0})
    ->Args({32, 2048, 2, 0})
    ->Args({1, 8192, 2, 1})
    ->Args({32, 2048, 1, 1})
    ->Args({32, 2048, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
