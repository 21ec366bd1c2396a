// The Gated DeltaNet kernels (attention/gated_delta) against a float64 reference written from
// the layer's definition (docs/gated-deltanet.md): the whole sequence from a zero state, every
// token's state recomputed from the conv rows, no shared code with the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/cpu/gated_delta_net.h"
#include "tests/support/gated_delta_reference.h"
#include "tests/support/test_support.h"

namespace moert::attention {
namespace {

using testing::Case;
using testing::cases;
using testing::Inputs;
using testing::random_inputs;
using testing::reference_mixer;

// The kernels over the tokens in chunks of the given sizes (repeated to cover T), carrying the
// conv and delta-rule states from chunk to chunk.
std::vector<float> kernel_mixer(const Case& c, const Inputs& in, float eps, const std::vector<int64_t>& chunks) {
  const GatedDeltaShape& s = c.shape;
  const int64_t channels = s.conv_channels();
  const int nv = s.num_value_heads, dv = s.value_head_dim;
  std::vector<float> conv_state(static_cast<size_t>(s.conv_state_size()), 0.0f);
  std::vector<float> state(static_cast<size_t>(s.recurrent_state_size()), 0.0f);
  std::vector<float> out(static_cast<size_t>(c.num_tokens * nv * dv));
  size_t next_chunk = 0;
  for (int64_t first = 0; first < c.num_tokens;) {
    const int64_t n = std::min(chunks[next_chunk++ % chunks.size()], c.num_tokens - first);
    std::vector<float> conv(static_cast<size_t>(n * channels)), decay(static_cast<size_t>(n * nv)), beta(decay.size());
    causal_conv1d_silu(in.u.data() + first * channels, n, channels, in.conv_weight.data(), s.conv_width,
                       conv_state.data(), conv.data());
    gated_delta_gates(in.a.data() + first * nv, in.b.data() + first * nv, n, nv, in.a_log.data(), in.dt_bias.data(),
                      decay.data(), beta.data());
    float* o = out.data() + first * nv * dv;
    gated_delta_rule(conv.data(), n, s, decay.data(), beta.data(), state.data(), o);
    gated_rms_norm(o, in.z.data() + first * nv * dv, n * nv, dv, in.norm_weight.data(), eps, o);
    first += n;
  }
  return out;
}

TEST(GatedDeltaNet, MixerMatchesFloat64Reference) {
  for (const Case& c : cases()) {
    const Inputs in = random_inputs(c, 7);
    const std::vector<double> want = reference_mixer(c, in, 1e-6);
    const std::vector<float> got = kernel_mixer(c, in, 1e-6f, {c.num_tokens});
    double norm = 0;
    for (double x : want) norm += x * x;
    ASSERT_GT(norm, 1e-3) << "the reference output must not be all zeros";
    EXPECT_LT(testing::relative_l2_error(got.data(), want.data(), static_cast<int64_t>(got.size())), 2e-6) << "NK " << c.shape.num_key_heads << " NV " << c.shape.num_value_heads;
  }
}

TEST(GatedDeltaNet, ChunkedPrefillAndDecodeGiveTheWholePromptsBits) {
  for (const Case& c : cases()) {
    const Inputs in = random_inputs(c, 11);
    const std::vector<float> whole = kernel_mixer(c, in, 1e-6f, {c.num_tokens});
    // Chunks shorter than the conv history, decode (one token at a time), and unaligned mixes.
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>{1}, {2}, {3, 1, 5}, {7, 2}}) {
      EXPECT_EQ(kernel_mixer(c, in, 1e-6f, chunks), whole) << "chunks of " << chunks[0];
    }
  }
}

// A verify of T tokens keeps the state after each; resuming from the one after token t (and
// the conv state rolled forward over rows 0..t) equals a run of the first t + 1 tokens.
TEST(GatedDeltaNet, StatesAfterEachTokenAreTheShorterRunsStates) {
  const Case c{{2, 8, 4, 12, 4}, 6};
  const Inputs in = random_inputs(c, 13);
  const GatedDeltaShape& s = c.shape;
  const int64_t channels = s.conv_channels(), size = s.recurrent_state_size();
  const int nv = s.num_value_heads;
  std::vector<float> conv(static_cast<size_t>(c.num_tokens * channels)), decay(static_cast<size_t>(c.num_tokens * nv)),
      beta(decay.size()), out(static_cast<size_t>(c.num_tokens * nv * s.value_head_dim));
  std::vector<float> conv_state(static_cast<size_t>(s.conv_state_size()), 0.0f), state(static_cast<size_t>(size), 0.0f);
  std::vector<float> after(static_cast<size_t>(c.num_tokens * size));
  causal_conv1d_silu(in.u.data(), c.num_tokens, channels, in.conv_weight.data(), s.conv_width, conv_state.data(),
                     conv.data());
  gated_delta_gates(in.a.data(), in.b.data(), c.num_tokens, nv, in.a_log.data(), in.dt_bias.data(), decay.data(),
                    beta.data());
  gated_delta_rule(conv.data(), c.num_tokens, s, decay.data(), beta.data(), state.data(), out.data(), after.data());
  EXPECT_EQ(std::vector<float>(after.end() - size, after.end()), state);
  for (int64_t t = 0; t < c.num_tokens; ++t) {
    std::vector<float> short_conv_state(conv_state.size(), 0.0f), short_state(state.size(), 0.0f), short_out(out.size());
    gated_delta_rule(conv.data(), t + 1, s, decay.data(), beta.data(), short_state.data(), short_out.data());
    EXPECT_EQ(std::vector<float>(after.begin() + t * size, after.begin() + (t + 1) * size), short_state) << t;
    std::vector<float> rolled(conv_state.size(), 0.0f), ignored(static_cast<size_t>((t + 1) * channels));
    advance_conv_state(in.u.data(), t + 1, channels, s.conv_width, rolled.data());
    causal_conv1d_silu(in.u.data(), t + 1, channels, in.conv_weight.data(), s.conv_width, short_conv_state.data(),
                       ignored.data());
    EXPECT_EQ(rolled, short_conv_state) << t;
  }
}

TEST(GatedDeltaNet, ConvStateHoldsTheLastRowsOfTheHistory) {
  const int64_t channels = 3;
  const int width = 4;
  std::vector<float> weight(static_cast<size_t>(channels * width), 1.0f);
  std::vector<float> state = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // rows -3, -2, -1
  std::vector<float> u = {10, 11, 12}, out(3);
  causal_conv1d_silu(u.data(), 1, channels, weight.data(), width, state.data(), out.data());
  EXPECT_EQ(state, (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11, 12}));
  const double sum0 = 1 + 4 + 7 + 10;
  EXPECT_NEAR(out[0], sum0 / (1 + std::exp(-sum0)), 1e-5);
  std::vector<float> u5(15);
  for (size_t i = 0; i < u5.size(); ++i) u5[i] = 100.0f + static_cast<float>(i);
  std::vector<float> out5(15);
  causal_conv1d_silu(u5.data(), 5, channels, weight.data(), width, state.data(), out5.data());
  EXPECT_EQ(state, (std::vector<float>(u5.begin() + 6, u5.end())));
}

TEST(GatedDeltaNet, GatesFollowPyTorchSoftplus) {
  const std::vector<float> a = {30.0f, -30.0f, 0.5f}, b = {0.0f, 2.0f, -1.0f};
  const std::vector<float> a_log = {0.25f}, dt_bias = {0.1f};
  std::vector<float> decay(3), beta(3);
  gated_delta_gates(a.data(), b.data(), 3, 1, a_log.data(), dt_bias.data(), decay.data(), beta.data());
  const double scale = std::exp(0.25);
  EXPECT_NEAR(decay[0], -scale * 30.1, 1e-4);  // above the threshold: softplus(x) = x
  EXPECT_NEAR(decay[1], -scale * std::log1p(std::exp(-29.9)), 1e-17);
  EXPECT_NEAR(decay[2], -scale * std::log1p(std::exp(0.6)), 1e-6);
  EXPECT_FLOAT_EQ(beta[0], 0.5f);
  EXPECT_NEAR(beta[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-7);
}

}  // namespace
}  // namespace moert::attention
