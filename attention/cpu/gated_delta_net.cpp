#include "attention/cpu/gated_delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace moert::attention {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

// x / sqrt(|x|^2 + 1e-6) * scale into out [dim].
void l2_normalize(const float* x, int dim, float scale, float* out) {
  float sum_sq = 0.0f;
  for (int i = 0; i < dim; ++i) sum_sq += x[i] * x[i];
  const float factor = scale / std::sqrt(sum_sq + 1e-6f);
  for (int i = 0; i < dim; ++i) out[i] = x[i] * factor;
}

}  // namespace

void causal_conv1d_silu(const float* u, int64_t num_tokens, int64_t channels, const float* weight, int width,
                        float* state, float* out) {
  const int64_t history = width - 1;  // rows of state
  // Row s of (state ++ u), s in [-history, num_tokens).
  auto row = [&](int64_t s) { return s < 0 ? state + (history + s) * channels : u + s * channels; };
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* y = out + t * channels;
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (int j = 0; j < width; ++j) sum += weight[c * width + j] * row(t - history + j)[c];
      y[c] = silu(sum);
    }
  }
  advance_conv_state(u, num_tokens, channels, width, state);
}

void advance_conv_state(const float* u, int64_t num_tokens, int64_t channels, int width, float* state) {
  const int64_t history = width - 1;
  if (history == 0) return;
  // The last `history` rows of (state ++ u), oldest first.
  const int64_t kept_from_state = std::max<int64_t>(history - num_tokens, 0);
  if (kept_from_state > 0) {
    std::memmove(state, state + (history - kept_from_state) * channels,
                 static_cast<size_t>(kept_from_state * channels) * sizeof(float));
  }
  const int64_t from_u = history - kept_from_state;
  std::memcpy(state + kept_from_state * channels, u + (num_tokens - from_u) * channels,
              static_cast<size_t>(from_u * channels) * sizeof(float));
}

void gated_delta_gates(const float* a, const float* b, int64_t num_tokens, int num_value_heads, const float* a_log,
                       const float* dt_bias, float* decay, float* beta) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < num_value_heads; ++j) {
      const int64_t i = t * num_value_heads + j;
      const float x = a[i] + dt_bias[j];
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      decay[i] = -std::exp(a_log[j]) * softplus;
      beta[i] = 1.0f / (1.0f + std::exp(-b[i]));
    }
  }
}

void gated_delta_rule(const float* conv_rows, int64_t num_tokens, const GatedDeltaShape& shape, const float* decay,
                      const float* beta, float* state, float* out, float* states_after) {
  const int nk = shape.num_key_heads, dk = shape.key_head_dim;
  const int nv = shape.num_value_heads, dv = shape.value_head_dim;
  const int per_key_head = nv / nk;  // R
  const int64_t channels = shape.conv_channels();
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<float> q(static_cast<size_t>(nk) * dk), k(q.size()), read(static_cast<size_t>(dv));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = conv_rows + t * channels;
    const float* v_row = row + 2 * static_cast<int64_t>(nk) * dk;
    for (int i = 0; i < nk; ++i) {
      l2_normalize(row + static_cast<int64_t>(i) * dk, dk, q_scale, q.data() + static_cast<size_t>(i) * dk);
      l2_normalize(row + static_cast<int64_t>(nk + i) * dk, dk, 1.0f, k.data() + static_cast<size_t>(i) * dk);
    }
    for (int j = 0; j < nv; ++j) {
      const float* qh = q.data() + static_cast<size_t>(j / per_key_head) * dk;
      const float* kh = k.data() + static_cast<size_t>(j / per_key_head) * dk;
      const float* v = v_row + static_cast<int64_t>(j) * dv;
      float* s = state + static_cast<int64_t>(j) * dk * dv;
      const float g = std::exp(decay[t * nv + j]);
      const float b = beta[t * nv + j];
      // Decay, and read S^T k' with the decayed state (d ascending).
      std::fill(read.begin(), read.end(), 0.0f);
      for (int d = 0; d < dk; ++d) {
        float* s_row = s + static_cast<int64_t>(d) * dv;
        for (int e = 0; e < dv; ++e) {
          s_row[e] *= g;
          read[static_cast<size_t>(e)] += s_row[e] * kh[d];
        }
      }
      for (int e = 0; e < dv; ++e) read[static_cast<size_t>(e)] = b * (v[e] - read[static_cast<size_t>(e)]);
      // Write k' (outer) delta, and read the output S^T q' from the written state.
      float* o = out + (t * nv + j) * static_cast<int64_t>(dv);
      std::fill(o, o + dv, 0.0f);
      for (int d = 0; d < dk; ++d) {
        float* s_row = s + static_cast<int64_t>(d) * dv;
        for (int e = 0; e < dv; ++e) {
          s_row[e] += kh[d] * read[static_cast<size_t>(e)];
          o[e] += s_row[e] * qh[d];
        }
      }
    }
    if (states_after != nullptr) {
      const int64_t size = shape.recurrent_state_size();
      std::copy(state, state + size, states_after + t * size);
    }
  }
}

void gated_rms_norm(const float* x, const float* z, int64_t num_rows, int dim, const float* weight, float eps,
                    float* y) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    float* yr = y + r * dim;
    float sum_sq = 0.0f;
    for (int i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv_rms * weight[i] * silu(zr[i]);
  }
}

namespace {

// gated_delta_net_sequence without copies.
void mix_rows(const GatedDeltaShape& shape, const GatedDeltaParams& params, const float* u, const float* z,
              const float* a, const float* b, int64_t num_tokens, float* conv_state, float* recurrent_state,
              float* out, float* conv_states_after, float* recurrent_states_after) {
  const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads;
  std::vector<float> conv_rows(static_cast<size_t>(num_tokens * channels));
  if (conv_states_after == nullptr) {
    causal_conv1d_silu(u, num_tokens, channels, params.conv_weight, shape.conv_width, conv_state, conv_rows.data());
  } else {  // row by row (each row's output is the same either way), keeping each state
    const int64_t size = shape.conv_state_size();
    for (int64_t t = 0; t < num_tokens; ++t) {
      causal_conv1d_silu(u + t * channels, 1, channels, params.conv_weight, shape.conv_width, conv_state,
                         conv_rows.data() + t * channels);
      std::copy(conv_state, conv_state + size, conv_states_after + t * size);
    }
  }
  std::vector<float> decay(static_cast<size_t>(num_tokens * nv)), beta(decay.size());
  gated_delta_gates(a, b, num_tokens, shape.num_value_heads, params.a_log, params.dt_bias, decay.data(), beta.data());
  gated_delta_rule(conv_rows.data(), num_tokens, shape, decay.data(), beta.data(), recurrent_state, out,
                   recurrent_states_after);
  gated_rms_norm(out, z, num_tokens * nv, shape.value_head_dim, params.norm_weight, params.norm_eps, out);
}

}  // namespace

void gated_delta_net_sequence(const GatedDeltaShape& shape, const GatedDeltaParams& params, const float* u,
                              const float* z, const float* a, const float* b, int64_t num_tokens, float* conv_state,
                              float* recurrent_state, float* out, float* conv_states_after,
                              float* recurrent_states_after, std::span<const StateCopy> copies) {
  const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads, width = nv * shape.value_head_dim;
  const int64_t conv_size = shape.conv_state_size(), state_size = shape.recurrent_state_size();
  int64_t first = 0;  // rows [first, end) of each segment, the last ending at num_tokens
  for (size_t i = 0; i <= copies.size(); ++i) {
    const int64_t end = i < copies.size() ? copies[i].row + 1 : num_tokens;
    if (end > first) {
      mix_rows(shape, params, u + first * channels, z + first * width, a + first * nv, b + first * nv, end - first,
               conv_state, recurrent_state, out + first * width,
               conv_states_after != nullptr ? conv_states_after + first * conv_size : nullptr,
               recurrent_states_after != nullptr ? recurrent_states_after + first * state_size : nullptr);
      first = end;
    }
    if (i < copies.size()) {
      std::copy(conv_state, conv_state + conv_size, copies[i].conv);
      std::copy(recurrent_state, recurrent_state + state_size, copies[i].recurrent);
    }
  }
}

}  // namespace moert::attention
