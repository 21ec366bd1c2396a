// Backend conformance (conformance_test.cpp): the linear-attention ops. gated_delta_net over a
// batch of sequences with ragged rows, each carrying its own state across two calls, against the
// float64 mixer (tests/support/gated_delta_reference.h); the per-row candidates a verify keeps;
// sigmoid_mul against float64.
#include <gtest/gtest.h>

#include "tests/runtime/backend/conformance_test_support.h"
#include "tests/support/gated_delta_reference.h"

namespace moert::backend::conformance {
namespace {

// F32 storage on the backend's device holding `values`.
Buffer on_device(Backend& backend, const std::vector<float>& values) {
  Buffer buffer = backend.allocate(DType::kF32, {std::max<int64_t>(static_cast<int64_t>(values.size()), 1)});
  backend.copy_bytes(buffer.ptr<void>(), values, static_cast<int64_t>(values.size() * sizeof(float)));
  return buffer;
}

std::vector<float> to_host(Backend& backend, const Buffer& buffer, int64_t count) {
  std::vector<float> host(static_cast<size_t>(count));
  backend.to_host(buffer.ptr<float>(), count, host.data());
  return host;
}

// Three sequences of one layer shape (R = 2, DK != DV, W = 4) with 1, 6 and 11 rows, each from a
// zero state, run as two calls (the first `split` rows of each, then the rest): every
// sequence's output is the float64 mixer over its whole rows, and the candidates kept for the
// last sequence in the second call end with its final state, bit for bit.
TEST_P(Conformance, GatedDeltaNetCarriesEachSequencesStateAsFloat64) {
  const attention::GatedDeltaShape shape{2, 32, 4, 24, 4};
  const std::vector<int64_t> lengths{1, 6, 11};
  const int64_t channels = shape.conv_channels(), nv = shape.num_value_heads, width = nv * shape.value_head_dim;
  std::vector<testing::Inputs> inputs;
  std::vector<Buffer> conv_states, states;
  for (size_t s = 0; s < lengths.size(); ++s) {
    inputs.push_back(testing::random_inputs({shape, lengths[s]}, static_cast<uint32_t>(31 + s)));
    conv_states.push_back(on_device(*backend_, std::vector<float>(static_cast<size_t>(shape.conv_state_size()), 0.0f)));
    states.push_back(on_device(*backend_, std::vector<float>(static_cast<size_t>(shape.recurrent_state_size()), 0.0f)));
  }
  // One layer's parameters for every sequence (the first sequence's draw).
  const testing::Inputs& layer = inputs[0];
  for (testing::Inputs& in : inputs) {
    in.conv_weight = layer.conv_weight;
    in.a_log = layer.a_log;
    in.dt_bias = layer.dt_bias;
    in.norm_weight = layer.norm_weight;
  }
  const attention::GatedDeltaParams params{layer.conv_weight.data(), layer.a_log.data(), layer.dt_bias.data(),
                                           layer.norm_weight.data(), 1e-6f};
  // The parameters are model weights: host memory the backend may read or copy (Backend::
  // place_host_weights).
  backend_->place_host_weights(layer.conv_weight.data(), static_cast<int64_t>(layer.conv_weight.size() * 4));
  backend_->place_host_weights(layer.a_log.data(), static_cast<int64_t>(layer.a_log.size() * 4));
  backend_->place_host_weights(layer.dt_bias.data(), static_cast<int64_t>(layer.dt_bias.size() * 4));
  backend_->place_host_weights(layer.norm_weight.data(), static_cast<int64_t>(layer.norm_weight.size() * 4));
  std::vector<std::vector<float>> outputs(lengths.size());
  Buffer conv_candidates, state_candidates;
  int64_t last_rows = 0;
  for (int call = 0; call < 2; ++call) {
    std::vector<float> u, z, a, b;
    std::vector<Backend::RecurrentSequence> sequences;
    int64_t rows = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t split = lengths[s] / 2;
      const int64_t first = call == 0 ? 0 : split, count = call == 0 ? split : lengths[s] - split;
      if (count == 0) continue;
      const testing::Inputs& in = inputs[s];
      u.insert(u.end(), in.u.begin() + first * channels, in.u.begin() + (first + count) * channels);
      z.insert(z.end(), in.z.begin() + first * width, in.z.begin() + (first + count) * width);
      a.insert(a.end(), in.a.begin() + first * nv, in.a.begin() + (first + count) * nv);
      b.insert(b.end(), in.b.begin() + first * nv, in.b.begin() + (first + count) * nv);
      sequences.push_back({rows, count, conv_states[s].ptr<float>(), states[s].ptr<float>(), nullptr, nullptr});
      rows += count;
    }
    if (call == 1) {  // the last sequence keeps candidates
      last_rows = sequences.back().num_rows;
      conv_candidates = backend_->allocate(DType::kF32, {last_rows * shape.conv_state_size()});
      state_candidates = backend_->allocate(DType::kF32, {last_rows * shape.recurrent_state_size()});
      sequences.back().conv_states_after = conv_candidates.ptr<float>();
      sequences.back().recurrent_states_after = state_candidates.ptr<float>();
    }
    const Buffer du = on_device(*backend_, u), dz = on_device(*backend_, z), da = on_device(*backend_, a);
    const Buffer db = on_device(*backend_, b);
    Buffer out = backend_->allocate(DType::kF32, {rows * width});
    backend_->gated_delta_net(shape, params, du.ptr<float>(), dz.ptr<float>(), da.ptr<float>(), db.ptr<float>(),
                              sequences, out.ptr<float>());
    const std::vector<float> host = to_host(*backend_, out, rows * width);
    size_t next = 0;
    for (size_t s = 0; s < lengths.size(); ++s) {
      const int64_t split = lengths[s] / 2, count = call == 0 ? split : lengths[s] - split;
      if (count == 0) continue;
      const Backend::RecurrentSequence& seq = sequences[next++];
      outputs[s].insert(outputs[s].end(), host.begin() + seq.first_row * width,
                        host.begin() + (seq.first_row + count) * width);
    }
  }
  for (size_t s = 0; s < lengths.size(); ++s) {
    const std::vector<double> want = testing::reference_mixer({shape, lengths[s]}, inputs[s], 1e-6);
    ASSERT_EQ(outputs[s].size(), want.size());
    EXPECT_LT(relative_l2_error(outputs[s].data(), want.data(), static_cast<int64_t>(want.size())), 1e-5)
        << "sequence " << s << " of " << lengths[s] << " rows";
  }
  const int64_t state_size = shape.recurrent_state_size(), conv_size = shape.conv_state_size();
  const std::vector<float> final_state = to_host(*backend_, states.back(), state_size);
  const std::vector<float> candidates = to_host(*backend_, state_candidates, last_rows * state_size);
  EXPECT_TRUE(std::equal(final_state.begin(), final_state.end(), candidates.end() - state_size));
  const std::vector<float> final_conv = to_host(*backend_, conv_states.back(), conv_size);
  const std::vector<float> conv_kept = to_host(*backend_, conv_candidates, last_rows * conv_size);
  EXPECT_TRUE(std::equal(final_conv.begin(), final_conv.end(), conv_kept.end() - conv_size));
  // The conv state holds the sequence's last W - 1 pre-conv rows (its u), oldest first.
  const testing::Inputs& last = inputs.back();
  const std::vector<float> expected_conv(last.u.end() - conv_size, last.u.end());
  EXPECT_EQ(final_conv, expected_conv);
}

TEST_P(Conformance, SigmoidMulMatchesFloat64) {
  const int64_t count = 1000;
  const std::vector<float> x = random_floats(count, 2.0f), gate = random_floats(count, 4.0f);
  Buffer dx = on_device(*backend_, x);
  const Buffer dgate = on_device(*backend_, gate);
  backend_->sigmoid_mul(dx.ptr<float>(), dgate.ptr<float>(), count);
  const std::vector<float> got = to_host(*backend_, dx, count);
  std::vector<double> want(static_cast<size_t>(count));
  for (size_t i = 0; i < want.size(); ++i) want[i] = x[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
  EXPECT_LT(relative_l2_error(got.data(), want.data(), count), kTolerance);
}

}  // namespace
}  // namespace moert::backend::conformance
