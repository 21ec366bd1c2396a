// The linear kernels on the GPU (docs/cuda-backend.md, "Linear kernels"; scripts/device-check.sh):
// one [N, K] weight per format with random valid codes, against a device copy measured in the
// same run. Prints one JSON line:
//   {"n", "k", "copy_gb_s", "formats": {"<format>": {"weight_bytes", "decode_s", "decode_gb_s",
//    "decode_vs_copy", "decode_speedup_vs_bf16", "prefill_rows", "prefill_s", "prefill_tflops"}}}
// decode: one row (the warp kernel), weight bytes read per second; decode_vs_copy compares it
// with the read rate of cudaMemcpy (device to device; it reads and writes, so copy_gb_s counts
// both). prefill: `prefill_rows` rows (the tensor-core kernel for BF16, FP8, FP4; F16 takes the
// SIMT tiles and is the baseline of the tensor-core speed-up).
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/bench/bench_timing.h"
#include "quant/cuda/linear.h"

#define CHECK_CUDA MOERT_BENCH_CHECK_CUDA

namespace {

namespace kernels = moert::cuda;
using Kind = kernels::DeviceWeight::Kind;
using moert::gpu_bench::int_arg;
using moert::gpu_bench::seconds_per_call;

template <typename T>
T* upload(const std::vector<T>& host) {
  void* device = nullptr;
  CHECK_CUDA(cudaMalloc(&device, host.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(device);
}

// Random bytes that decode to finite values of the format's element codec.
std::vector<uint8_t> random_codes(size_t count, Kind kind, std::mt19937& rng) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) {
    uint8_t b = static_cast<uint8_t>(rng());
    if (kind == Kind::kBF16 && i % 2 == 1) b = static_cast<uint8_t>(0x3c | (b & 0x81));        // |x| ~ 2^-7..2^-6
    if (kind == Kind::kF16 && i % 2 == 1) b = static_cast<uint8_t>(0x20 | (b & 0x83));         // small normals
    if ((kind == Kind::kFp8Block || kind == Kind::kFp8Tensor) && (b & 0x7F) == 0x7F) b ^= 1;  // not NaN
    bytes[i] = b;
  }
  return bytes;
}

kernels::DeviceWeight make_weight(Kind kind, int64_t n, int64_t k, std::mt19937& rng, int64_t& bytes) {
  kernels::DeviceWeight w;
  w.kind = kind;
  w.rows = n;
  w.cols = k;
  const bool fp4 = kind == Kind::kNvfp4 || kind == Kind::kMxfp4;
  const int64_t element_bits = fp4 ? 4 : (kind == Kind::kBF16 || kind == Kind::kF16) ? 16 : 8;
  bytes = n * k * element_bits / 8;
  w.data = upload(random_codes(static_cast<size_t>(bytes), kind, rng));
  if (kind == Kind::kNvfp4) {
    std::vector<uint8_t> scales(static_cast<size_t>(n * k / 16));
    for (uint8_t& s : scales) s = static_cast<uint8_t>(0x30 + rng() % 16);  // E4M3 ~0.25..0.5
    bytes += static_cast<int64_t>(scales.size());
    w.scales = upload(scales);
    w.global_scale = 0.01f;
  } else if (kind == Kind::kMxfp4) {
    std::vector<uint8_t> scales(static_cast<size_t>(n * k / 32));
    for (uint8_t& s : scales) s = static_cast<uint8_t>(118 + rng() % 4);  // E8M0 2^-9..2^-6
    bytes += static_cast<int64_t>(scales.size());
    w.scales = upload(scales);
  } else if (kind == Kind::kFp8Block) {
    const std::vector<float> tiles(static_cast<size_t>(((n + 127) / 128) * ((k + 127) / 128)), 1e-3f);
    bytes += static_cast<int64_t>(tiles.size() * sizeof(float));
    w.block_scale_inv = upload(tiles);
  } else if (kind == Kind::kFp8Tensor) {
    w.global_scale = 1e-3f;
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = int_arg(argc, argv, "--n", 16384), k = int_arg(argc, argv, "--k", 16384);
  const int64_t prefill_rows = int_arg(argc, argv, "--prefill-rows", 512);
  const int repeats = static_cast<int>(int_arg(argc, argv, "--repeats", 10));
  std::mt19937 rng(7);
  std::vector<float> host_x(static_cast<size_t>(prefill_rows * k));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : host_x) v = uniform(rng);
  const float* x = upload(host_x);
  float* y = nullptr;
  CHECK_CUDA(cudaMalloc(&y, static_cast<size_t>(prefill_rows * n) * sizeof(float)));

  // The copy baseline: as many bytes as the BF16 weight.
  const size_t copy_bytes = static_cast<size_t>(n * k * 2);
  void *copy_src = nullptr, *copy_dst = nullptr;
  CHECK_CUDA(cudaMalloc(&copy_src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&copy_dst, copy_bytes));
  CHECK_CUDA(cudaMemset(copy_src, 0x3c, copy_bytes));
  const double copy_s = seconds_per_call(
      [&] { CHECK_CUDA(cudaMemcpyAsync(copy_dst, copy_src, copy_bytes, cudaMemcpyDeviceToDevice)); }, repeats);
  const double copy_gb_s = 2.0 * static_cast<double>(copy_bytes) / copy_s / 1e9;
  CHECK_CUDA(cudaFree(copy_src));
  CHECK_CUDA(cudaFree(copy_dst));

  const std::pair<const char*, Kind> formats[] = {{"bf16", Kind::kBF16},      {"f16", Kind::kF16},
                                                  {"fp8_block", Kind::kFp8Block}, {"nvfp4", Kind::kNvfp4},
                                                  {"mxfp4", Kind::kMxfp4}};
  double bf16_decode_s = 0.0;
  std::string json;
  for (const auto& [name, kind] : formats) {
    int64_t weight_bytes = 0;
    const kernels::DeviceWeight w = make_weight(kind, n, k, rng, weight_bytes);
    auto run = [&](int64_t rows) {
      if (kernels::linear(w, x, rows, nullptr, y, nullptr) != 0) {
        std::fprintf(stderr, "linear(%s, %lld rows) failed\n", name, static_cast<long long>(rows));
        std::exit(1);
      }
    };
    const double decode_s = seconds_per_call([&] { run(1); }, repeats);
    const double prefill_s = seconds_per_call([&] { run(prefill_rows); }, repeats);
    if (kind == Kind::kBF16) bf16_decode_s = decode_s;
    const double decode_gb_s = static_cast<double>(weight_bytes) / decode_s / 1e9;
    char entry[512];
    std::snprintf(entry, sizeof(entry),
                  "%s\"%s\": {\"weight_bytes\": %lld, \"decode_s\": %.4e, \"decode_gb_s\": %.1f, "
                  "\"decode_vs_copy\": %.3f, \"decode_speedup_vs_bf16\": %.3f, \"prefill_rows\": %lld, "
                  "\"prefill_s\": %.4e, \"prefill_tflops\": %.2f}",
                  json.empty() ? "" : ", ", name, static_cast<long long>(weight_bytes), decode_s, decode_gb_s,
                  decode_gb_s / (copy_gb_s / 2.0), bf16_decode_s / decode_s, static_cast<long long>(prefill_rows),
                  prefill_s, 2.0 * static_cast<double>(prefill_rows * n * k) / prefill_s / 1e12);
    json += entry;
    CHECK_CUDA(cudaFree(const_cast<void*>(w.data)));
    if (w.scales != nullptr) CHECK_CUDA(cudaFree(const_cast<uint8_t*>(w.scales)));
    if (w.block_scale_inv != nullptr) CHECK_CUDA(cudaFree(const_cast<float*>(w.block_scale_inv)));
  }
  std::printf("{\"n\": %lld, \"k\": %lld, \"copy_gb_s\": %.1f, \"formats\": {%s}}\n", static_cast<long long>(n),
              static_cast<long long>(k), copy_gb_s, json.c_str());
  return 0;
}
