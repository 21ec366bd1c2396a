// The Gated DeltaNet token mixer of Qwen3-Next / Qwen3.5-MoE linear-attention layers
// (docs/gated-deltanet.md): a causal depthwise convolution over the projected rows, then a
// per-value-head recurrent state updated by the gated delta rule, then a gated RMSNorm. These
// are the portable CPU kernels of one sequence: the recurrence is the token-by-token form (the
// chunked form of other engines computes the same function), so a prompt split into prefill
// chunks of any sizes gives the same bits as the whole prompt at once.
//
// Shape legend: T tokens of one sequence; C = 2 * NK * DK + NV * DV conv channels, laid out
// [q of every key head | k of every key head | v of every value head]; W conv width
// (linear_conv_kernel_dim); NK key heads of DK, NV value heads of DV, R = NV / NK value heads
// per key head: value head j reads key head j / R (consecutive value heads share a key head).
//
// The state a sequence carries from step to step (the "recurrent" cache kind): the conv state
// [W-1, C] (the last W-1 pre-conv rows) and the delta-rule state [NV, DK, DV] in F32, both
// zero for a fresh sequence. Everything here is F32; the state never narrows (a BF16 state
// drifts within a few decode steps: docs/gated-deltanet.md "Traps").
#pragma once

#include <cstdint>
#include <span>

#include "attention/gated_delta_shape.h"

namespace moert::attention {

// Causal depthwise convolution then SiLU, over one sequence's rows u [T, C]:
//   out[t, c] = silu(sum_{j < W} weight[c, j] * x[t - W + 1 + j, c])
// where x is u preceded by the W-1 rows of `state` [W-1, C] (oldest first). Afterwards
// `state` holds the last W-1 rows of (state ++ u). weight: [C, W] (conv1d.weight [C, 1, W]).
// out may not alias u.
void causal_conv1d_silu(const float* u, int64_t num_tokens, int64_t channels, const float* weight, int width,
                        float* state, float* out);

// The per-token, per-value-head gates from the projections a, b [T, NV]:
//   beta = sigmoid(b),  decay = -exp(a_log) * softplus(a + dt_bias)   (log of the state's decay)
// softplus(x) = log(1 + exp(x)), and x itself above 20 (PyTorch's threshold). a_log, dt_bias: [NV].
void gated_delta_gates(const float* a, const float* b, int64_t num_tokens, int num_value_heads, const float* a_log,
                       const float* dt_bias, float* decay, float* beta);

// The gated delta rule over conv rows [T, C] (the output of causal_conv1d_silu), in token order.
// Per token t and value head j (key head i = j / R):
//   q' = q_i / sqrt(|q_i|^2 + 1e-6) / sqrt(DK),  k' = k_i / sqrt(|k_i|^2 + 1e-6)
//   S_j = exp(decay[t, j]) * S_j;  S_j += k' (outer) beta[t, j] * (v_j - S_j^T k');  out[t, j] = S_j^T q'
// state: [NV, DK, DV] (S_j[d, e] at j*DK*DV + d*DV + e), updated in place; out: [T, NV, DV].
// states_after, when not null: [T, NV, DK, DV], the state after each token (what a speculative
// verify keeps so that a rejection resumes from the last accepted token's state, as a recurrent
// state cannot be truncated).
void gated_delta_rule(const float* conv_rows, int64_t num_tokens, const GatedDeltaShape& shape, const float* decay,
                      const float* beta, float* state, float* out, float* states_after = nullptr);

// The conv state after the first `num_tokens` rows of u [>= num_tokens, C] on top of `state`
// [W-1, C] (what causal_conv1d_silu leaves, without computing outputs): a verify's conv state
// rolled back to its accepted rows.
void advance_conv_state(const float* u, int64_t num_tokens, int64_t channels, int width, float* state);

// The output norm of a linear-attention layer, per row of `dim` values (one value head):
//   y = x / sqrt(mean(x^2) + eps) * weight * silu(z)
// weight is used as it is (not 1 + weight, unlike the layer norms of these models).
// x, z, y: [num_rows, dim]; y may alias x.
void gated_rms_norm(const float* x, const float* z, int64_t num_rows, int dim, const float* weight, float eps,
                    float* y);

// The whole token mixer of one sequence's T rows after the projections (docs/gated-deltanet.md
// steps 2-6 but the output projection): causal_conv1d_silu of u [T, C] from conv_state,
// gated_delta_gates of a, b [T, NV], gated_delta_rule from recurrent_state, then gated_rms_norm
// per value head with z [T, NV DV] into out [T, NV DV]. Both states advance over the T rows.
// conv_states_after ([T, W-1, C]) and recurrent_states_after ([T, NV, DK, DV]), when not null,
// receive the states after each row (a speculative verify's candidates); `copies` (rows
// ascending, < T) the states after those rows. The results are the same bits either way (the
// rows run in segments between copies: the recurrence is chunking-invariant).
void gated_delta_net_sequence(const GatedDeltaShape& shape, const GatedDeltaParams& params, const float* u,
                              const float* z, const float* a, const float* b, int64_t num_tokens, float* conv_state,
                              float* recurrent_state, float* out, float* conv_states_after = nullptr,
                              float* recurrent_states_after = nullptr, std::span<const StateCopy> copies = {});

}  // namespace moert::attention
