// Decode attention bandwidth on the GPU against a device copy measured in the same run
// (docs/cuda-backend.md, "Device check"): B sequences of `context` positions in a paged
// BF16 (or F32 / FP8) cache, one query row each, GQA. Prints one JSON line:
//   {"batch", "context", "kv_bytes", "attention_s", "attention_gb_s", "copy_gb_s", "ratio"}
// where attention_gb_s counts the K/V bytes read per call and copy_gb_s the bytes read and
// written by cudaMemcpy (device to device) of the same size.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention/cuda/attention.h"
#include "core/cuda/bench/bench_timing.h"
#include "core/cuda/cuda_api.h"

#define CHECK_CUDA MOERT_BENCH_CHECK_CUDA

namespace {

using moert::gpu_bench::seconds_per_call;

int arg(int argc, char** argv, const char* name, int fallback) {
  return static_cast<int>(moert::gpu_bench::int_arg(argc, argv, name, fallback));
}

}  // namespace

int main(int argc, char** argv) {
  namespace kernels = moert::cuda;
  const int batch = arg(argc, argv, "--batch", 32), context = arg(argc, argv, "--context", 4096);
  const int heads = arg(argc, argv, "--heads", 32), kv_heads = arg(argc, argv, "--kv-heads", 4);
  const int head_dim = arg(argc, argv, "--head-dim", 128), block_size = arg(argc, argv, "--block-size", 16);
  const int repeats = arg(argc, argv, "--repeats", 20);
  const int pages_per_seq = (context + block_size - 1) / block_size;
  const int num_blocks = batch * pages_per_seq + 1;  // + the null block
  const size_t element_bytes = 2;                    // BF16
  const size_t cache_bytes = static_cast<size_t>(num_blocks) * block_size * kv_heads * head_dim * element_bytes;

  void *k_cache = nullptr, *v_cache = nullptr;
  CHECK_CUDA(cudaMalloc(&k_cache, cache_bytes));
  CHECK_CUDA(cudaMalloc(&v_cache, cache_bytes));
  CHECK_CUDA(cudaMemset(k_cache, 0x3c, cache_bytes));  // small finite BF16 values
  CHECK_CUDA(cudaMemset(v_cache, 0x3c, cache_bytes));
  moert::attention::PagedKvLayer layer{k_cache, v_cache, num_blocks, block_size, kv_heads, head_dim,
                                       moert::DType::kBF16};

  std::vector<int32_t> qo_indptr{0}, page_indptr{0}, pages, last_len;
  for (int b = 0; b < batch; ++b) {
    for (int p = 0; p < pages_per_seq; ++p) pages.push_back(1 + b * pages_per_seq + p);
    qo_indptr.push_back(b + 1);
    page_indptr.push_back(static_cast<int32_t>(pages.size()));
    last_len.push_back(context - (pages_per_seq - 1) * block_size);
  }
  auto upload = [](const std::vector<int32_t>& host) {
    int32_t* device = nullptr;
    CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(int32_t)));
    CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return device;
  };
  moert::attention::PagedAttentionPlan plan{batch, upload(qo_indptr), upload(page_indptr), upload(pages),
                                            upload(last_len), {}};
  float *q = nullptr, *out = nullptr;
  const size_t q_bytes = static_cast<size_t>(batch) * heads * head_dim * sizeof(float);
  CHECK_CUDA(cudaMalloc(&q, q_bytes));
  CHECK_CUDA(cudaMalloc(&out, q_bytes));
  CHECK_CUDA(cudaMemset(q, 0, q_bytes));

  const double kv_bytes = 2.0 * batch * context * kv_heads * head_dim * element_bytes;
  const double attention_s = seconds_per_call(
      [&] {
        if (kernels::paged_attention(q, layer, plan, batch, heads, out, nullptr) != 0) std::exit(1);
      },
      repeats);
  void* copy_dst = nullptr;
  CHECK_CUDA(cudaMalloc(&copy_dst, static_cast<size_t>(kv_bytes)));
  const double copy_s = seconds_per_call(
      [&] {
        CHECK_CUDA(cudaMemcpyAsync(copy_dst, k_cache, static_cast<size_t>(kv_bytes / 2), cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(copy_dst) + static_cast<size_t>(kv_bytes / 2), v_cache,
                                   static_cast<size_t>(kv_bytes / 2), cudaMemcpyDeviceToDevice));
      },
      repeats);
  CHECK_CUDA(cudaDeviceSynchronize());
  const double attention_gb_s = kv_bytes / attention_s / 1e9;
  const double copy_gb_s = 2.0 * kv_bytes / copy_s / 1e9;  // read + written
  std::printf("{\"batch\": %d, \"context\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"kv_bytes\": %.0f, "
              "\"attention_s\": %.6g, \"attention_gb_s\": %.1f, \"copy_gb_s\": %.1f, \"ratio\": %.3f}\n",
              batch, context, heads, kv_heads, head_dim, kv_bytes, attention_s, attention_gb_s, copy_gb_s,
              attention_gb_s / copy_gb_s);
  return 0;
}
