// Multi-head latent attention at decode (docs/mla.md): the absorbed form over the latent
// cache against the two materialised forms, one layer, B sequences decoding one token each
// at context L, through the CPU backend's ops. DeepSeek-V3's per-head widths (dc 512,
// dr 64, dn 128, dv 128) with H = 16 heads (the release's 128 under 8-way tensor
// parallelism; --heads to change).
//   absorbed:   latent cache, dc + dr values per token. q_lat = W_UK^T q_nope per head, attention
//               of H heads over one kv head of [c | k_pe] rows, then W_UV per head.
//   expanded:   a cache of materialised K [H, dn + dr] and V [H, dv] (padded to dn + dr, as
//               flash kernels do) per token: H * 2 * (dn + dr) values; plain MHA decode.
//   re-expand:  the latent cache, expanded through kv_b_proj into K/V for every position at
//               every step, then the same MHA decode.
// Prints milliseconds per step (median), the ratio to absorbed and the cache bytes per token,
// and checks that the three forms agree (relative L2 of the outputs).
//   bench_mla_decode [--heads H] [--batch B] [--threads N] [--max-context L]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "quant/weight.h"
#include "runtime/backend/cpu/cpu_backend.h"

namespace {

using namespace moert;

constexpr int64_t kLatent = 512, kRope = 64, kNope = 128, kValue = 128;  // dc, dr, dn, dv
constexpr int64_t kRow = kLatent + kRope;                                // latent row
constexpr int64_t kQkHead = kNope + kRope;                               // materialised head
constexpr int kBlockSize = 16;

std::vector<float> random_values(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

double median_ms(int reps, const std::function<void()>& step) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// B sequences of `context` positions in consecutive pages 1, 2, ... (0 is the null block).
struct Plan {
  std::vector<int32_t> qo_indptr, page_indptr, pages, last_page_len;
  std::vector<int64_t> slots;  // [B * context]
  attention::PagedAttentionPlan plan;
  int num_blocks = 0;
  Plan(int batch, int64_t context, float scale) {
    const int64_t pages_per_seq = (context + kBlockSize - 1) / kBlockSize;
    num_blocks = static_cast<int>(batch * pages_per_seq + 1);
    for (int b = 0; b <= batch; ++b) {
      qo_indptr.push_back(b);
      page_indptr.push_back(static_cast<int32_t>(b * pages_per_seq));
    }
    for (int64_t p = 1; p < num_blocks; ++p) pages.push_back(static_cast<int32_t>(p));
    last_page_len.assign(static_cast<size_t>(batch), static_cast<int32_t>(context - (pages_per_seq - 1) * kBlockSize));
    for (int b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < context; ++t) slots.push_back((1 + b * pages_per_seq) * kBlockSize + t);
    }
    plan = {batch, qo_indptr.data(), page_indptr.data(), pages.data(), last_page_len.data()};
    plan.variant.softmax_scale = scale;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int heads = 16, batch = 4, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t max_context = 4096;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::stol(argv[i + 1]);
    if (flag == "--heads") heads = static_cast<int>(value);
    else if (flag == "--batch") batch = static_cast<int>(value);
    else if (flag == "--threads") threads = static_cast<int>(value);
    else if (flag == "--max-context") max_context = value;
    else {
      std::fprintf(stderr, "bench_mla_decode: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  backend::CpuBackend cpu(pool);
  std::mt19937 rng(11);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kQkHead)));
  // kv_b_proj [H * (dn + dv), dc], head-major [k_nope rows | v rows], and its absorbed halves.
  const std::vector<float> kv_b = random_values(heads * (kNope + kValue) * kLatent, 1.0f / std::sqrt(float(kLatent)), rng);
  std::vector<float> key_absorb(static_cast<size_t>(heads * kLatent * kNope)), value_up(static_cast<size_t>(heads * kValue * kLatent));
  for (int64_t h = 0; h < heads; ++h) {
    const float* head = kv_b.data() + h * (kNope + kValue) * kLatent;
    for (int64_t n = 0; n < kNope; ++n) {
      for (int64_t i = 0; i < kLatent; ++i) key_absorb[static_cast<size_t>((h * kLatent + i) * kNope + n)] = head[n * kLatent + i];
    }
    std::copy_n(head + kNope * kLatent, kValue * kLatent, value_up.begin() + h * kValue * kLatent);
  }
  const quant::LinearWeight kv_b_weight = quant::LinearWeight::from_dense(
      TensorView::contiguous(DType::kF32, {heads * (kNope + kValue), kLatent}, const_cast<float*>(kv_b.data())));

  std::printf("MLA decode, one layer: %d sequences x 1 token, %d heads, dc %lld dr %lld dn %lld dv %lld, %d threads\n",
              batch, heads, (long long)kLatent, (long long)kRope, (long long)kNope, (long long)kValue, threads);
  std::printf("cache bytes per token and layer (F32): absorbed %lld, expanded %lld (%.0fx)\n",
              (long long)(kRow * 4), (long long)(heads * 2 * kQkHead * 4), double(heads * 2 * kQkHead) / kRow);
  std::printf("%8s %12s %12s %12s %10s %10s %12s\n", "context", "absorbed_ms", "expanded_ms", "reexpand_ms",
              "expanded/a", "reexpand/a", "max_rel_diff");
  for (int64_t context = 128; context <= max_context; context *= 2) {
    Plan plan(batch, context, scale);
    const int64_t positions = batch * context;
    // The cached rows: latent c (after its norm) and the rotated k_pe, as the model writes them.
    const std::vector<float> rows = random_values(positions * kRow, 1.0f, rng);  // [B * L, dc + dr]
    const std::vector<float> q = random_values(batch * heads * kQkHead, 1.0f, rng);  // [B, H, dn + dr]
    std::vector<float> latent_storage(static_cast<size_t>(plan.num_blocks) * kBlockSize * kRow);
    attention::PagedKvLayer latent{latent_storage.data(), latent_storage.data(), plan.num_blocks, kBlockSize, 1,
                                   static_cast<int>(kRow), DType::kF32};
    cpu.write_kv(latent, rows, rows, plan.slots, positions);

    // Absorbed.
    std::vector<float> q_abs(static_cast<size_t>(batch * heads * kRow)), o_lat(q_abs.size());
    std::vector<float> absorbed_out(static_cast<size_t>(batch * heads * kValue));
    auto absorbed = [&] {
      cpu.per_head_linear(key_absorb.data(), heads, kLatent, kNope, host_ptr(q.data()), kQkHead, batch, host_ptr(q_abs.data()), kRow);
      cpu.copy_rows(host_ptr(q_abs.data() + kLatent), kRow, host_ptr(q.data() + kNope), kQkHead, batch * heads, kRope);
      cpu.paged_attention(host_ptr(q_abs.data()), latent, plan.plan, heads, host_ptr(o_lat.data()));
      cpu.per_head_linear(value_up.data(), heads, kValue, kLatent, host_ptr(o_lat.data()), kRow, batch, host_ptr(absorbed_out.data()), kValue);
    };

    // Materialise K/V of every position from the latent rows: kv = kv_b_proj c.
    std::vector<float> compressed(static_cast<size_t>(positions * kLatent)), kv(static_cast<size_t>(positions * heads * (kNope + kValue)));
    std::vector<float> keys(static_cast<size_t>(positions * heads * kQkHead)), values(keys.size(), 0.0f);
    auto expand = [&] {
      cpu.copy_rows(host_ptr(compressed.data()), kLatent, host_ptr(rows.data()), kRow, positions, kLatent);
      cpu.linear(kv_b_weight, host_ptr(compressed.data()), positions, nullptr, host_ptr(kv.data()));
      cpu.copy_rows(host_ptr(keys.data()), kQkHead, host_ptr(kv.data()), kNope + kValue, positions * heads, kNope);
      for (int h = 0; h < heads; ++h) {
        cpu.copy_rows(host_ptr(keys.data()) + h * kQkHead + kNope, heads * kQkHead, host_ptr(rows.data() + kLatent), kRow, positions, kRope);
      }
      cpu.copy_rows(host_ptr(values.data()), kQkHead, host_ptr(kv.data() + kNope), kNope + kValue, positions * heads, kValue);
    };
    std::vector<float> k_storage(static_cast<size_t>(plan.num_blocks) * kBlockSize * heads * kQkHead), v_storage(k_storage.size());
    attention::PagedKvLayer expanded_layer{k_storage.data(), v_storage.data(), plan.num_blocks, kBlockSize, heads,
                                           static_cast<int>(kQkHead), DType::kF32};
    std::vector<float> mha_out(static_cast<size_t>(batch * heads * kQkHead)), expanded_out(absorbed_out.size());
    auto mha = [&] {
      cpu.paged_attention(host_ptr(q.data()), expanded_layer, plan.plan, heads, host_ptr(mha_out.data()));
      cpu.copy_rows(host_ptr(expanded_out.data()), kValue, host_ptr(mha_out.data()), kQkHead, batch * heads, kValue);
    };
    auto reexpand = [&] {
      expand();
      cpu.write_kv(expanded_layer, keys, values, plan.slots, positions);
      mha();
    };
    reexpand();  // also fills the expanded cache for the expanded form
    const std::vector<float> reexpand_out = expanded_out;
    const int reps = context <= 1024 ? 9 : 5;
    const double absorbed_ms = median_ms(reps, absorbed);
    const double expanded_ms = median_ms(reps, mha);
    const double reexpand_ms = median_ms(context <= 512 ? 3 : 1, reexpand);
    const double diff = std::max(relative_l2(expanded_out, absorbed_out), relative_l2(reexpand_out, absorbed_out));
    std::printf("%8lld %12.3f %12.3f %12.3f %10.2f %10.2f %12.2e\n", (long long)context, absorbed_ms, expanded_ms,
                reexpand_ms, expanded_ms / absorbed_ms, reexpand_ms / absorbed_ms, diff);
    if (diff > 1e-4) {
      std::fprintf(stderr, "bench_mla_decode: the forms disagree at context %lld (relative L2 %.3g)\n",
                   (long long)context, diff);
      return 1;
    }
  }
  return 0;
}
