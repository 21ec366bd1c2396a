// The launchers of quant/cuda/linear.h, run through the emulation (host memory stands in
// for device memory, stream null), against their CPU twins:
//  * linear: every weight format (packed data from the CPU quantizers of quant/formats), row
//    counts on both kernel paths (warp <= 16 rows, tiled above), with and without bias, to a
//    relative L2 error of 2e-6 against a float64 dot over the CPU-dequantized weights; and
//    the weights the kernels decode equal the CPU dequantizer's floats bit for bit (one-hot x).
//  * grouped_expert_ffn: 5 experts, top-2 routing, both activations, with and without
//    biases, dense and packed, against experts::grouped_expert_ffn over glu_ffn_forward.
//  * per_head_linear: against a float64 loop, with strides wider than the data (the floats
//    past each head's data stay untouched).
// Shapes stay small: the emulation starts one thread per GPU thread of each block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "experts/cpu/expert_ffn.h"
#include "experts/glu_activation.h"
#include "experts/grouped/dispatch_layout.h"
#include "experts/grouped/grouped_expert_ffn.h"
#include "quant/cpu/apply_linear.h"
#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"
#include "quant/weight.h"
#include "quant/cuda/linear.h"
#include "tests/support/test_support.h"

namespace moert {
namespace {

namespace kernels = moert::cuda_emulated;
using Kind = kernels::DeviceWeight::Kind;

constexpr double kTolerance = 2e-6;
constexpr Kind kAllKinds[] = {Kind::kF32,   Kind::kBF16,     Kind::kF16,      Kind::kNvfp4,
                              Kind::kMxfp4, Kind::kFp8Block, Kind::kFp8Tensor};

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kF32: return "F32";
    case Kind::kBF16: return "BF16";
    case Kind::kF16: return "F16";
    case Kind::kNvfp4: return "NVFP4";
    case Kind::kMxfp4: return "MXFP4";
    case Kind::kFp8Block: return "FP8Block";
    case Kind::kFp8Tensor: return "FP8Tensor";
  }
  return "?";
}

bool is_fp4(Kind kind) { return kind == Kind::kNvfp4 || kind == Kind::kMxfp4; }

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng) * scale;
  return v;
}

// One [N, K] weight in a given format: the buffers, the CPU's view (LinearWeight), the
// kernels' view (DeviceWeight over the same host buffers) and the CPU-dequantized floats.
// Not movable: both views point into the buffers.
struct TestWeight {
  TestWeight(Kind kind, int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
    const std::vector<float> w = random_floats(rng, rows * cols, scale);
    device.kind = kind;
    device.rows = rows;
    device.cols = cols;
    quant::QuantizedWeightView q;
    q.rows = rows;
    q.cols = cols;
    switch (kind) {
      case Kind::kF32:
        dense_f32 = w;
        cpu = quant::LinearWeight::from_dense(TensorView::contiguous(DType::kF32, {rows, cols}, dense_f32.data()));
        device.data = dense_f32.data();
        break;
      case Kind::kBF16:
      case Kind::kF16:
        for (float v : w) dense_16.push_back(kind == Kind::kBF16 ? f32_to_bf16(v) : f32_to_f16(v));
        cpu = quant::LinearWeight::from_dense(
            TensorView::contiguous(kind == Kind::kBF16 ? DType::kBF16 : DType::kF16, {rows, cols}, dense_16.data()));
        device.data = dense_16.data();
        break;
      case Kind::kNvfp4:
        nvfp4 = quant::nvfp4_quantize(w.data(), rows, cols).value();
        q.format = quant::WeightFormat::kNvfp4;
        q.data = nvfp4.packed.data();
        q.scales = nvfp4.block_scales.data();
        q.global_scale = nvfp4.global_scale;
        break;
      case Kind::kMxfp4:
        mxfp4 = quant::mxfp4_quantize(w.data(), rows, cols).value();
        q.format = quant::WeightFormat::kMxfp4;
        q.data = mxfp4.packed.data();
        q.scales = mxfp4.scales.data();
        break;
      case Kind::kFp8Block:
        fp8_block = quant::fp8_block_quantize(w.data(), rows, cols).value();
        q.format = quant::WeightFormat::kFp8Block;
        q.data = fp8_block.data.data();
        q.block_scale_inv = fp8_block.scale_inv.data();
        break;
      case Kind::kFp8Tensor:
        fp8_tensor = quant::fp8_tensor_quantize(w.data(), rows, cols).value();
        q.format = quant::WeightFormat::kFp8Tensor;
        q.data = fp8_tensor.data.data();
        q.global_scale = fp8_tensor.scale;
        break;
    }
    if (kind != Kind::kF32 && kind != Kind::kBF16 && kind != Kind::kF16) {
      cpu = quant::LinearWeight::from_packed(q);
      device.data = q.data;
      device.scales = q.scales;
      device.block_scale_inv = q.block_scale_inv;
      device.global_scale = q.global_scale;
    }
    dequantized.resize(static_cast<size_t>(rows * cols));
    quant::dequantize_to_f32(cpu, dequantized.data());
  }
  TestWeight(const TestWeight&) = delete;
  TestWeight& operator=(const TestWeight&) = delete;

  std::vector<float> dense_f32;
  std::vector<uint16_t> dense_16;
  quant::Nvfp4Tensor nvfp4;
  quant::Mxfp4Tensor mxfp4;
  quant::Fp8BlockTensor fp8_block;
  quant::Fp8TensorScaled fp8_tensor;
  quant::LinearWeight cpu;
  kernels::DeviceWeight device;
  std::vector<float> dequantized;  // [N, K]
};

// y[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]) in float64.
std::vector<double> reference_linear(const std::vector<float>& x, int64_t num_rows, const std::vector<float>& w,
                                     int64_t n_out, int64_t k_in, const float* bias) {
  std::vector<double> y(static_cast<size_t>(num_rows * n_out));
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t n = 0; n < n_out; ++n) {
      double sum = bias != nullptr ? bias[n] : 0.0;
      for (int64_t k = 0; k < k_in; ++k) sum += static_cast<double>(x[r * k_in + k]) * w[n * k_in + k];
      y[static_cast<size_t>(r * n_out + n)] = sum;
    }
  }
  return y;
}

// ---- linear ------------------------------------------------------------------------------------
// N = 36 (partial warp and tile columns), or 136 for FP8 block (two 128-row scale tiles, the
// second ragged); K = 300 (ragged FP8 scale tile; K % 8 != 0: a partial chunk; W's rows are
// not 16-byte aligned except F32's) or 320 for the FP4 formats (K % 32 == 0), and the wide
// K = 1056 (every format's rows 16-byte aligned: the warp kernel's 16-byte loads, more than one
// pass of the warp over K, a ragged FP8 scale tile).
int64_t test_out_features(Kind kind) { return kind == Kind::kFp8Block ? 136 : 36; }
int64_t test_in_features(Kind kind) { return is_fp4(kind) ? 320 : 300; }
constexpr int64_t kWideInFeatures = 1056;

struct LinearCase {
  Kind kind;
  int64_t rows;
  bool bias;
  int64_t in_features;
};

class LinearKernel : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearKernel, MatchesCpuAndFloat64Reference) {
  const LinearCase c = GetParam();
  const int64_t n_out = test_out_features(c.kind), k_in = c.in_features;
  std::mt19937 rng(1234 + static_cast<int>(c.kind) * 97 + static_cast<int>(c.rows));
  const TestWeight w(c.kind, n_out, k_in, rng, 0.05f);
  const std::vector<float> x = random_floats(rng, c.rows * k_in);
  const std::vector<float> bias = random_floats(rng, n_out);
  const float* b = c.bias ? bias.data() : nullptr;

  std::vector<float> got(static_cast<size_t>(c.rows * n_out), std::numeric_limits<float>::quiet_NaN());
  ASSERT_EQ(0, kernels::linear(w.device, x.data(), c.rows, b, got.data(), nullptr));
  std::vector<float> cpu(got.size());
  ThreadPool pool(2);
  quant::apply_linear(w.cpu, x.data(), c.rows, b, cpu.data(), pool);
  const std::vector<double> reference = reference_linear(x, c.rows, w.dequantized, n_out, k_in, b);

  const auto count = static_cast<int64_t>(got.size());
  EXPECT_LT(testing::relative_l2_error(got.data(), reference.data(), count), kTolerance);
  EXPECT_LT(testing::relative_l2_error(cpu.data(), reference.data(), count), kTolerance);  // the twin itself
}

std::vector<LinearCase> linear_cases() {
  std::vector<LinearCase> cases;
  for (Kind kind : kAllKinds) {
    for (int64_t rows : {1, 3, 9, 40}) {
      for (bool bias : {false, true}) cases.push_back({kind, rows, bias, test_in_features(kind)});
    }
    for (int64_t rows : {1, 9, 40}) cases.push_back({kind, rows, true, kWideInFeatures});
    cases.push_back({kind, 70, false, test_in_features(kind)});  // two row tiles, the second partial
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllFormats, LinearKernel, ::testing::ValuesIn(linear_cases()),
                         [](const ::testing::TestParamInfo<LinearCase>& info) {
                           return std::string(kind_name(info.param.kind)) + "_R" + std::to_string(info.param.rows) +
                                  (info.param.bias ? "_bias" : "") + "_K" + std::to_string(info.param.in_features);
                         });

// With x = one-hot rows every dot product is a single weight, so the outputs are the floats
// the kernels decode: they must be the CPU dequantizer's, bit for bit. The identity (R = K
// rows) runs the tiled kernel (F32, F16) or the tensor-core kernel, 8 one-hot rows the warp
// kernel. One allowed difference: the tensor-core kernel applies NVFP4's weight_scale_2 to the
// sum instead of rounding it into each weight (linear.cu), so there an NVFP4 weight may be 1
// ulp off (the warp kernel's are exact).
class LinearDecode : public ::testing::TestWithParam<Kind> {};

TEST_P(LinearDecode, WeightsEqualCpuDequantizedBitForBit) {
  const Kind kind = GetParam();
  for (const int64_t k_in : {test_in_features(kind), kWideInFeatures}) {
    const int64_t n_out = test_out_features(kind);
    std::mt19937 rng(77 + static_cast<int>(kind));
    const TestWeight w(kind, n_out, k_in, rng, 0.05f);
    auto check = [&](const std::vector<int64_t>& hot_columns) {
      const auto rows = static_cast<int64_t>(hot_columns.size());
      std::vector<float> x(static_cast<size_t>(rows * k_in), 0.0f);
      for (int64_t r = 0; r < rows; ++r) x[static_cast<size_t>(r * k_in + hot_columns[static_cast<size_t>(r)])] = 1.0f;
      std::vector<float> y(static_cast<size_t>(rows * n_out), std::numeric_limits<float>::quiet_NaN());
      ASSERT_EQ(0, kernels::linear(w.device, x.data(), rows, nullptr, y.data(), nullptr));
      int mismatches = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < n_out; ++n) {
          const float expected = w.dequantized[static_cast<size_t>(n * k_in + hot_columns[static_cast<size_t>(r)])];
          const float actual = y[static_cast<size_t>(r * n_out + n)];
          const bool one_ulp_allowed = kind == Kind::kNvfp4 && rows > 16;
          const bool equal = actual == expected ||
                             (one_ulp_allowed && std::nextafter(expected, actual) == actual);
          if (!equal && mismatches++ < 5) {
            ADD_FAILURE() << kind_name(kind) << " W[" << n << ", " << hot_columns[static_cast<size_t>(r)]
                          << "]: kernel " << actual << ", CPU " << expected;
          }
        }
      }
      EXPECT_EQ(mismatches, 0) << "rows = " << rows << ", K = " << k_in;
    };
    std::vector<int64_t> identity(static_cast<size_t>(k_in));
    for (int64_t k = 0; k < k_in; ++k) identity[static_cast<size_t>(k)] = k;
    check(identity);
    check({0, 1, 15, 16, 127, 128, k_in - 2, k_in - 1});
    if (k_in == kWideInFeatures) check({31, 32, 33, 511, 512, 1023, k_in / 2 + 7, k_in - 17});
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, LinearDecode, ::testing::ValuesIn(kAllKinds),
                         [](const ::testing::TestParamInfo<Kind>& info) { return std::string(kind_name(info.param)); });

TEST(LinearKernelEdges, NothingToDoReturnsZeroAndWritesNothing) {
  std::mt19937 rng(5);
  const TestWeight w(Kind::kF32, 8, 32, rng, 1.0f);
  float y = 42.0f;
  const float x = 1.0f;
  EXPECT_EQ(0, kernels::linear(w.device, &x, 0, nullptr, &y, nullptr));
  EXPECT_EQ(42.0f, y);
  EXPECT_EQ(0, kernels::per_head_linear(w.dense_f32.data(), 1, 8, 4, &x, 4, 0, &y, 8, nullptr));
  EXPECT_EQ(42.0f, y);
  kernels::GroupedExpertArgs args;
  EXPECT_EQ(0, kernels::grouped_expert_ffn(args, 0, nullptr));
}

// ---- grouped_expert_ffn --------------------------------------------------------------------------
// 5 experts, D = 32, I = 64, top-2 routing over experts {0, 2, 4} (1 and 3 have no work, so
// the table has holes). 11 tokens: every group <= 11 entries (warp kernel); 48 tokens: the
// largest group > 16 (tiled kernel).
struct GroupedCase {
  Kind kind;
  experts::GluActivation::Kind activation;
  bool biases;
  int64_t tokens;
};

class GroupedExperts : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GroupedExperts, MatchesCpuGroupedExpertFfn) {
  const GroupedCase c = GetParam();
  constexpr int kExperts = 5, kTopK = 2;
  constexpr int64_t kHidden = 32, kInter = 64;
  std::mt19937 rng(900 + static_cast<int>(c.kind) * 13 + static_cast<int>(c.tokens) + (c.biases ? 1 : 0));
  experts::GluActivation activation;
  activation.kind = c.activation;

  struct Expert {
    std::unique_ptr<TestWeight> gate, up, down;
    std::vector<float> gate_bias, up_bias, down_bias;
  };
  std::vector<Expert> weights(kExperts);
  std::vector<kernels::DeviceExpert> table(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    Expert& ex = weights[static_cast<size_t>(e)];
    ex.gate = std::make_unique<TestWeight>(c.kind, kInter, kHidden, rng, 0.8f);  // |gate|, |up| reach the clamp
    ex.up = std::make_unique<TestWeight>(c.kind, kInter, kHidden, rng, 0.8f);
    ex.down = std::make_unique<TestWeight>(c.kind, kHidden, kInter, rng, 0.1f);
    kernels::DeviceExpert& d = table[static_cast<size_t>(e)];
    d.gate = ex.gate->device;
    d.up = ex.up->device;
    d.down = ex.down->device;
    if (c.biases) {
      ex.gate_bias = random_floats(rng, kInter);
      ex.up_bias = random_floats(rng, kInter);
      ex.down_bias = random_floats(rng, kHidden);
      d.gate_bias = ex.gate_bias.data();
      d.up_bias = ex.up_bias.data();
      d.down_bias = ex.down_bias.data();
    }
  }
  table[1] = kernels::DeviceExpert{};  // never routed
  table[3] = kernels::DeviceExpert{};

  // Routing: two distinct experts of {0, 2, 4} per token, positive weights.
  const int32_t routable[] = {0, 2, 4};
  std::vector<int32_t> ids;
  std::vector<float> gate_weights;
  std::uniform_int_distribution<int> pick(0, 2);
  std::uniform_real_distribution<float> weight(0.1f, 1.0f);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int first = pick(rng);
    int second = pick(rng);
    while (second == first) second = pick(rng);
    ids.push_back(routable[first]);
    ids.push_back(routable[second]);
    gate_weights.push_back(weight(rng));
    gate_weights.push_back(weight(rng));
  }
  const experts::ExpertDispatchLayout layout =
      experts::layout_from_routing(ids, gate_weights, c.tokens, kTopK, kExperts).value();
  int64_t max_entries = 0;
  for (size_t a = 0; a < layout.experts.size(); ++a) {
    max_entries = std::max(max_entries, layout.cu_expert_entries[a + 1] - layout.cu_expert_entries[a]);
  }
  if (c.tokens <= 11) {
    ASSERT_LE(max_entries, 16) << "meant for the warp kernel";
  } else {
    ASSERT_GT(max_entries, 16) << "meant for the tiled kernel";
  }

  const std::vector<float> x = random_floats(rng, c.tokens * kHidden);
  const int64_t num_entries = layout.num_entries();
  std::vector<float> workspace(
      static_cast<size_t>(kernels::grouped_expert_workspace_floats(num_entries, kHidden, kInter)));
  std::vector<float> got(static_cast<size_t>(num_entries * kHidden), std::numeric_limits<float>::quiet_NaN());
  kernels::GroupedExpertArgs args;
  args.x = x.data();
  args.hidden_size = kHidden;
  args.intermediate_size = kInter;
  args.num_entries = num_entries;
  args.entry_row = layout.entry_row.data();
  args.entry_weight = layout.entry_weight.data();
  args.num_active = static_cast<int32_t>(layout.experts.size());
  args.active_experts = layout.experts.data();
  args.cu_expert_entries = layout.cu_expert_entries.data();
  args.expert_entry_idx = layout.expert_entry_idx.data();
  args.experts = table.data();
  args.activation = activation;
  args.workspace = workspace.data();
  args.contributions = got.data();
  ASSERT_EQ(0, kernels::grouped_expert_ffn(args, max_entries, nullptr));

  ThreadPool pool(2);
  std::vector<float> expected(got.size());
  experts::grouped_expert_ffn(
      layout, x, static_cast<int>(kHidden),
      [&](int e, const float* rows, int64_t num_rows, float* y) {
        const Expert& ex = weights[static_cast<size_t>(e)];
        experts::glu_ffn_forward(rows, num_rows, ex.gate->cpu, c.biases ? ex.gate_bias.data() : nullptr, ex.up->cpu,
                                 c.biases ? ex.up_bias.data() : nullptr, ex.down->cpu,
                                 c.biases ? ex.down_bias.data() : nullptr, activation, y, pool);
      },
      expected);
  const std::vector<double> reference(expected.begin(), expected.end());
  EXPECT_LT(testing::relative_l2_error(got.data(), reference.data(), static_cast<int64_t>(got.size())), kTolerance);
}

std::vector<GroupedCase> grouped_cases() {
  using Act = experts::GluActivation::Kind;
  std::vector<GroupedCase> cases;
  for (Act act : {Act::kSilu, Act::kClampedSwiglu}) {
    for (bool biases : {false, true}) cases.push_back({Kind::kF32, act, biases, 11});
  }
  cases.push_back({Kind::kMxfp4, Act::kClampedSwiglu, true, 11});  // gpt-oss
  cases.push_back({Kind::kNvfp4, Act::kSilu, false, 11});
  // The tiled kernel: both activations, and a packed format.
  cases.push_back({Kind::kF32, Act::kSilu, false, 48});
  cases.push_back({Kind::kF32, Act::kClampedSwiglu, true, 48});
  cases.push_back({Kind::kMxfp4, Act::kClampedSwiglu, true, 48});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupedExperts, ::testing::ValuesIn(grouped_cases()),
                         [](const ::testing::TestParamInfo<GroupedCase>& info) {
                           const GroupedCase& c = info.param;
                           return std::string(kind_name(c.kind)) +
                                  (c.activation == experts::GluActivation::Kind::kSilu ? "_silu" : "_swiglu") +
                                  (c.biases ? "_bias" : "") + "_T" + std::to_string(c.tokens);
                         });

// ---- per_head_linear -----------------------------------------------------------------------------
// H = 3, out = 5, in = 40, head strides 48 (x) and 8 (y): the floats past each head's data
// keep their sentinel bits. 3 tokens run the warp kernel, 20 the tiled one.
class PerHeadLinear : public ::testing::TestWithParam<int64_t> {};

TEST_P(PerHeadLinear, MatchesFloat64AndLeavesTailsAlone) {
  const int64_t tokens = GetParam();
  constexpr int kHeads = 3;
  constexpr int64_t kOut = 5, kIn = 40, kXStride = 48, kYStride = 8;
  std::mt19937 rng(31 + static_cast<int>(tokens));
  const std::vector<float> w = random_floats(rng, kHeads * kOut * kIn);
  const std::vector<float> x = random_floats(rng, tokens * kHeads * kXStride);
  constexpr float kSentinel = -12345.5f;
  std::vector<float> y(static_cast<size_t>(tokens * kHeads * kYStride), kSentinel);
  ASSERT_EQ(0, kernels::per_head_linear(w.data(), kHeads, kOut, kIn, x.data(), kXStride, tokens, y.data(), kYStride,
                                        nullptr));
  std::vector<float> got;
  std::vector<double> reference;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const float* slot = y.data() + (t * kHeads + h) * kYStride;
      for (int64_t o = 0; o < kOut; ++o) {
        double sum = 0.0;
        for (int64_t i = 0; i < kIn; ++i) {
          sum += static_cast<double>(w[static_cast<size_t>((h * kOut + o) * kIn + i)]) *
                 x[static_cast<size_t>((t * kHeads + h) * kXStride + i)];
        }
        reference.push_back(sum);
        got.push_back(slot[o]);
      }
      for (int64_t o = kOut; o < kYStride; ++o) EXPECT_EQ(std::memcmp(&slot[o], &kSentinel, sizeof(float)), 0);
    }
  }
  EXPECT_LT(testing::relative_l2_error(got.data(), reference.data(), static_cast<int64_t>(got.size())), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Tokens, PerHeadLinear, ::testing::Values(3, 20));

}  // namespace
}  // namespace moert
