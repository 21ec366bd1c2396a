#include "experts/cuda/router.h"

#include "core/cuda/cuda_api.h"
#include "core/cuda/device_math.h"

namespace moert::MOERT_CUDA_NS {
namespace {

constexpr int kThreads = 128;
constexpr double kSigmoidNormEps = 1e-20;  // experts/router.cpp

// The k largest of score[0, n) in descending order, ties to the lowest index (the CPU's
// partial_sort order): k passes, each keeping the first strictly larger score.
__device__ void top_k_desc(const float* score, int n, int k, bool* taken, int32_t* out) {
  for (int i = 0; i < n; ++i) taken[i] = false;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int i = 0; i < n; ++i) {
      if (!taken[i] && (best < 0 || score[i] > score[best])) best = i;
    }
    taken[best] = true;
    out[j] = best;
  }
}

// experts::finish_weights: w /= (sum + eps) in float64 when renormalising, then * scale.
__device__ void finish_weights(float* w, int k, bool renorm, double eps, float scale) {
  if (renorm) {
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += w[j];
    const double denom = sum + eps;
    for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / denom);
  }
  if (scale != 1.0f) {
    for (int j = 0; j < k; ++j) w[j] = mul_rn(w[j], scale);
  }
}

// One thread per token, operation for operation route_softmax_row / route_sigmoid_row.
__global__ void route_kernel(DeviceRouterConfig config, const float* logits, int64_t num_tokens, const float* bias,
                             int32_t* expert_ids, float* weights) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;  // no barrier in this kernel
  const int num_experts = config.num_experts, top_k = config.top_k;
  const float* logit = logits + t * num_experts;
  int32_t* ids = expert_ids + t * top_k;
  float* w = weights + t * top_k;
  float prob[kMaxRouterExperts];    // softmax p, or sigmoid s
  float select[kMaxRouterExperts];  // selection score
  bool taken[kMaxRouterExperts];
  if (!config.sigmoid) {
    float max_logit = logit[0];
    for (int e = 1; e < num_experts; ++e) max_logit = logit[e] > max_logit ? logit[e] : max_logit;
    double sum = 0.0;
    for (int e = 0; e < num_experts; ++e) {
      prob[e] = expf(logit[e] - max_logit);
      sum += prob[e];
    }
    for (int e = 0; e < num_experts; ++e) {
      prob[e] = static_cast<float>(prob[e] / sum);
      select[e] = bias != nullptr ? prob[e] + bias[e] : prob[e];
    }
    top_k_desc(select, num_experts, top_k, taken, ids);
    for (int j = 0; j < top_k; ++j) w[j] = prob[ids[j]];
    finish_weights(w, top_k, config.norm_topk_prob, 0.0, config.routed_scaling_factor);
    return;
  }
  for (int e = 0; e < num_experts; ++e) {
    prob[e] = 1.0f / (1.0f + expf(-logit[e]));
    select[e] = bias != nullptr ? prob[e] + bias[e] : prob[e];
  }
  if (config.n_group > 1) {
    // Group score: the sum of its top-2 selection scores (its only one for groups of 1);
    // experts of the groups not kept are masked with -inf (never 0: docs/moe.md).
    const int group_size = num_experts / config.n_group;
    float group_score[kMaxRouterGroups];
    int32_t kept_groups[kMaxRouterGroups];
    bool group_taken[kMaxRouterGroups];
    const float neg_inf = -bits_to_float(0x7f800000u);
    for (int g = 0; g < config.n_group; ++g) {
      const float* cg = select + g * group_size;
      if (group_size == 1) {
        group_score[g] = cg[0];
        continue;
      }
      float first = neg_inf, second = neg_inf;
      for (int i = 0; i < group_size; ++i) {
        if (cg[i] > first) {
          second = first;
          first = cg[i];
        } else if (cg[i] > second) {
          second = cg[i];
        }
      }
      group_score[g] = first + second;
    }
    top_k_desc(group_score, config.n_group, config.topk_group, group_taken, kept_groups);
    for (int g = 0; g < config.n_group; ++g) {
      bool kept = false;
      for (int j = 0; j < config.topk_group; ++j) kept = kept || kept_groups[j] == g;
      if (!kept) {
        for (int i = 0; i < group_size; ++i) select[g * group_size + i] = neg_inf;
      }
    }
  }
  top_k_desc(select, num_experts, top_k, taken, ids);
  for (int j = 0; j < top_k; ++j) w[j] = prob[ids[j]];
  finish_weights(w, top_k, config.norm_topk_prob, kSigmoidNormEps, config.routed_scaling_factor);
}

constexpr int kLayoutThreads = 256;

// One block. Each thread ranks its entries among all N (the grouped order) and among its
// token's K (the combine order); after the barrier thread 0 walks the grouped order once
// to find the groups. The grouped position of entry c is the number of entries ordered
// before it by (expert id, entry index), which is what a stable counting sort gives.
__global__ void plan_layout_kernel(const int32_t* ids, int64_t num_entries, int top_k, int64_t num_groups,
                                   DeviceLayoutArrays layout) {
  for (int64_t c = threadIdx.x; c < num_entries; c += blockDim.x) {
    const int32_t expert = ids[c];
    int64_t position = 0;
    for (int64_t other = 0; other < num_entries; ++other) {
      const int32_t e = ids[other];
      position += (e < expert || (e == expert && other < c)) ? 1 : 0;
    }
    layout.expert_entry_idx[position] = c;
    layout.entry_row[c] = c / top_k;
    const int64_t first = c - c % top_k;  // token's first entry
    int64_t slot = 0;
    for (int64_t other = first; other < first + top_k; ++other) {
      const int32_t e = ids[other];
      slot += (e < expert || (e == expert && other < c)) ? 1 : 0;
    }
    layout.src_rows[first + slot] = c;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int64_t groups = 0;
  int32_t previous = -1;
  for (int64_t p = 0; p < num_entries; ++p) {
    const int32_t expert = ids[layout.expert_entry_idx[p]];
    if (p == 0 || expert != previous) {
      layout.active_experts[groups] = expert;
      layout.cu_expert_entries[groups] = p;
      ++groups;
      previous = expert;
    }
  }
  for (int64_t a = groups; a <= num_groups; ++a) {
    if (a < num_groups) layout.active_experts[a] = previous < 0 ? 0 : previous;
    layout.cu_expert_entries[a] = num_entries;
  }
}

__global__ void count_kernel(const int32_t* ids, int64_t num_entries, int num_experts, int64_t* counts) {
  for (int e = static_cast<int>(threadIdx.x); e < num_experts; e += static_cast<int>(blockDim.x)) {
    int64_t count = 0;
    for (int64_t i = 0; i < num_entries; ++i) count += ids[i] == e ? 1 : 0;
    counts[e] += count;
  }
}

}  // namespace

int count_expert_ids(const int32_t* expert_ids, int64_t num_entries, int num_experts, int64_t* counts,
                     CUstream_st* stream) {
  if (num_entries == 0 || num_experts == 0) return 0;
  MOERT_LAUNCH(count_kernel, 1u, kLayoutThreads, stream, expert_ids, num_entries, num_experts, counts);
  return static_cast<int>(cudaGetLastError());
}

int plan_routed_layout(const int32_t* expert_ids, int64_t num_tokens, int top_k, int num_experts,
                       const DeviceLayoutArrays& layout, CUstream_st* stream) {
  const int64_t num_entries = num_tokens * top_k;
  if (num_entries == 0) return 0;
  if (num_entries > kMaxDeviceLayoutEntries) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t num_groups = num_entries < num_experts ? num_entries : num_experts;
  MOERT_LAUNCH(plan_layout_kernel, 1u, kLayoutThreads, stream, expert_ids, num_entries, top_k, num_groups, layout);
  return static_cast<int>(cudaGetLastError());
}

int route_tokens(const DeviceRouterConfig& config, const float* logits, int64_t num_tokens,
                 const float* correction_bias, int32_t* expert_ids, float* weights, CUstream_st* stream) {
  if (num_tokens == 0) return 0;
  if (config.num_experts > kMaxRouterExperts || config.n_group > kMaxRouterGroups) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  const int64_t blocks = ceil_div(num_tokens, kThreads);
  MOERT_LAUNCH(route_kernel, static_cast<unsigned>(blocks), kThreads, stream, config, logits, num_tokens,
               correction_bias, expert_ids, weights);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace moert::MOERT_CUDA_NS
