// Benchmark (not a test): the fused quantized linear kernels (NVFP4, MXFP4, FP8 block) next to
// the BF16 linear_forward, on the `large` preset's expert shapes (hidden 1024, width 1024: gate,
// up and down are each [1024, 1024]) for 16 experts, so the 48 matrices are streamed one after
// another like an MoE layer's expert FFNs. Reports weight bytes read per second (data + scales)
// and GFLOP/s for 1 and 2 threads and T = 1, 4, 8, 32 rows, against a plain memcpy measured in the
// same run. The *_cpu rows take the FP4 codes in the CPU order the loader repacks them into;
// fp8_block_loaded has its codes marked finite, as the loader marks them (no NaN handling).
// The *_int8 rows are the int8-activation mode (quant/cpu/int8_linear.h, CPU code order,
// through apply_linear: x's quantization included); fp8_block_bf16 is the bf16-activation mode
// of the FP8 weights (quant/cpu/bf16_linear.h, codes marked finite, x's rounding included).
//   bench_quantized_linear [experts=16] [min_seconds=0.3] [formats: comma-separated names, default all]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "quant/bf16.h"
#include "core/cpu/isa.h"
#include "quant/cpu/linear.h"
#include "quant/cpu/apply_linear.h"
#include "quant/cpu/bf16_linear.h"
#include "quant/cpu/int8_linear.h"
#include "quant/cpu/quantized_linear.h"
#include "core/tensor.h"

namespace {

using moert::ThreadPool;
using moert::quant::QuantizedWeightView;
using moert::quant::WeightFormat;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct CopyBandwidth {
  double read_gbs;        // bytes / time (each byte read once)
  double read_write_gbs;  // 2 * bytes / time (read + write traffic)
  double read_only_gbs;   // a sum over the source buffer: reads only
};

CopyBandwidth measure_copy(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);
  const int reps = 5;
  double start = now_s();
  for (int r = 0; r < reps; ++r) std::memcpy(dst.data(), src.data(), bytes);
  const double copy_s = now_s() - start;
  const uint64_t* words = reinterpret_cast<const uint64_t*>(src.data());
  const size_t num_words = bytes / sizeof(uint64_t);
  uint64_t acc[8] = {};
  start = now_s();
  for (int r = 0; r < reps; ++r) {
    for (size_t i = 0; i + 8 <= num_words; i += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += words[i + j];
    }
  }
  const double read_s = now_s() - start;
  uint64_t sink = 0;
  for (uint64_t a : acc) sink += a;
  if (sink == 42) std::printf(" ");  // keeps the read loop alive
  return {static_cast<double>(bytes) * reps / copy_s / 1e9, 2.0 * bytes * reps / copy_s / 1e9,
          static_cast<double>(bytes) * reps / read_s / 1e9};
}

// One format's weights for all matrices, as random but valid codes and scales.
struct Weights {
  std::string name;
  std::vector<uint8_t> data, scales;
  std::vector<float> block_scale_inv;
  std::vector<uint16_t> bf16;
  std::vector<QuantizedWeightView> views;  // empty for BF16
  int64_t bytes = 0;                       // read per pass over all matrices
};

Weights make_weights(const std::string& name, int64_t matrices, int64_t n, int64_t k, std::mt19937& rng) {
  Weights w;
  w.name = name;
  std::uniform_int_distribution<int> byte(0, 255);
  if (name == "bf16" || name == "bf16_bf16") {
    w.bf16.resize(static_cast<size_t>(matrices * n * k));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (auto& v : w.bf16) v = moert::quant::f32_to_bf16(normal(rng));
    w.bytes = static_cast<int64_t>(w.bf16.size() * 2);
    return w;
  }
  QuantizedWeightView view;
  view.rows = n;
  view.cols = k;
  int64_t data_per = 0, scales_per = 0, block_scales_per = 0;
  const bool int8 = name.ends_with("_int8");
  const bool cpu_order = name.ends_with("_cpu") || int8;  // codes repacked as at load (quant/quantized_weight.h)
  if (name.starts_with("nvfp4") || name.starts_with("mxfp4")) {
    const bool nv = name.starts_with("nvfp4");
    view.format = nv ? WeightFormat::kNvfp4 : WeightFormat::kMxfp4;
    data_per = n * k / 2;
    scales_per = n * k / (nv ? 16 : 32);
    w.data.resize(static_cast<size_t>(matrices * data_per));
    w.scales.resize(static_cast<size_t>(matrices * scales_per));
    for (auto& b : w.data) b = static_cast<uint8_t>(byte(rng));
    // E4M3 0x20..0x3F (2^-4 .. ~1) or E8M0 2^-10 .. 2^-5.
    for (auto& b : w.scales) b = static_cast<uint8_t>(nv ? 0x20 + byte(rng) % 32 : 117 + byte(rng) % 6);
    view.global_scale = 1.0f / 2688.0f;
  } else {
    view.format = WeightFormat::kFp8Block;
    data_per = n * k;
    block_scales_per = ((n + 127) / 128) * ((k + 127) / 128);
    w.data.resize(static_cast<size_t>(matrices * data_per));
    for (auto& b : w.data) b = static_cast<uint8_t>(byte(rng) % 0x7F) | static_cast<uint8_t>(byte(rng) & 0x80);
    w.block_scale_inv.resize(static_cast<size_t>(matrices * block_scales_per));
    for (auto& s : w.block_scale_inv) s = 0.02f / 448.0f * (1.0f + static_cast<float>(byte(rng)) / 256.0f);
  }
  for (int64_t m = 0; m < matrices; ++m) {
    QuantizedWeightView v = view;
    v.data = w.data.data() + m * data_per;
    if (cpu_order) v.code_order = moert::quant::Fp4CodeOrder::kCpuChunk32;
    if (int8) v.activations = moert::quant::ActivationPrecision::kInt8;
    // the codes above are never 0x7F / 0xFF
    v.fp8_codes_finite = name == "fp8_block_loaded" || name == "fp8_block_bf16";
    if (name == "fp8_block_bf16") v.activations = moert::quant::ActivationPrecision::kBf16;
    if (scales_per > 0) v.scales = w.scales.data() + m * scales_per;
    if (block_scales_per > 0) v.block_scale_inv = w.block_scale_inv.data() + m * block_scales_per;
    w.views.push_back(v);
    w.bytes += moert::quant::quantized_weight_bytes(v);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t experts = argc > 1 ? std::atoll(argv[1]) : 16;
  const double min_seconds = argc > 2 ? std::atof(argv[2]) : 0.3;
  const std::string only = argc > 3 ? "," + std::string(argv[3]) + "," : "";
  const std::vector<std::string> names = {"bf16",      "bf16_bf16", "nvfp4",     "nvfp4_cpu",        "nvfp4_int8",
                                          "mxfp4",     "mxfp4_cpu", "mxfp4_int8", "fp8_block", "fp8_block_loaded",
                                          "fp8_block_bf16"};
  // Every name asked for must be one of them: a typo would otherwise run nothing, silently.
  for (size_t at = 1; at < only.size();) {
    const size_t next = only.find(',', at);
    const std::string asked = only.substr(at, next - at);
    if (std::find(names.begin(), names.end(), asked) == names.end()) {
      std::fprintf(stderr, "bench_quantized_linear: unknown format '%s'\n", asked.c_str());
      return 2;
    }
    at = next + 1;
  }
  const int64_t n = 1024, k = 1024, matrices_per_expert = 3;  // gate, up, down
  const int64_t matrices = experts * matrices_per_expert;

  const size_t copy_bytes = 256u << 20;
  const CopyBandwidth copy = measure_copy(copy_bytes);
  std::printf("cpu path: linear %s, quantized %s, int8 activations %s, bf16 activations %s\n",
              moert::cpu::cpu_isa_name(), moert::quant::quantized_linear_isa_name(),
              moert::quant::int8_linear_isa_name(), moert::quant::bf16_linear_isa_name());
  std::printf("memcpy 256 MiB, 1 thread: read %.1f GB/s (bytes/time), read+write %.1f GB/s; read-only sum %.1f GB/s\n",
              copy.read_gbs, copy.read_write_gbs, copy.read_only_gbs);
  std::printf("weights: %lld experts x %lld matrices [%lld, %lld]\n\n", static_cast<long long>(experts),
              static_cast<long long>(matrices_per_expert), static_cast<long long>(n), static_cast<long long>(k));

  std::mt19937 rng(1234);
  std::vector<Weights> all;
  for (const std::string& name : names) {
    if (!only.empty() && only.find("," + name + ",") == std::string::npos) continue;
    all.push_back(make_weights(name, matrices, n, k, rng));
  }

  std::printf("%-16s %8s %7s %2s %10s %13s %9s\n", "format", "MiB", "threads", "T", "GB/s", "% memcpy rd", "GFLOP/s");
  for (const Weights& w : all) {
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (int64_t rows : {1, 4, 8, 32}) {
        std::vector<float> x(static_cast<size_t>(rows * k)), y(static_cast<size_t>(rows * n));
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
        std::vector<moert::quant::LinearWeight> dense;  // the BF16 rows' matrices
        for (int64_t m = 0; w.views.empty() && m < matrices; ++m) {
          dense.push_back(moert::quant::LinearWeight::from_dense(moert::TensorView::contiguous(
              moert::DType::kBF16, {n, k}, const_cast<uint16_t*>(w.bf16.data()) + m * n * k)));
          if (w.name == "bf16_bf16") moert::quant::enable_bf16_activations(dense.back());
        }
        auto pass = [&] {
          for (int64_t m = 0; m < matrices; ++m) {
            if (w.views.empty()) {
              moert::quant::apply_linear(dense[static_cast<size_t>(m)], x.data(), rows, nullptr, y.data(), pool);
            } else {
              moert::quant::apply_linear(moert::quant::LinearWeight::from_packed(w.views[static_cast<size_t>(m)]),
                                         x.data(), rows, nullptr, y.data(), pool);
            }
          }
        };
        pass();  // warm-up
        int reps = 0;
        const double start = now_s();
        double elapsed = 0.0;
        do {
          pass();
          ++reps;
          elapsed = now_s() - start;
        } while (elapsed < min_seconds);
        const double gbs = static_cast<double>(w.bytes) * reps / elapsed / 1e9;
        const double gflops = 2.0 * rows * n * k * matrices * reps / elapsed / 1e9;
        std::printf("%-16s %8.1f %7d %2lld %10.2f %12.0f%% %9.2f\n", w.name.c_str(),
                    static_cast<double>(w.bytes) / (1 << 20), threads, static_cast<long long>(rows), gbs,
                    100.0 * gbs / copy.read_gbs, gflops);
      }
    }
  }
  return 0;
}
