// Benchmark (not a test): throughput of the dense linear kernel on expert-sized matrices,
// next to a plain memory copy measured in the same run (the bandwidth limit).
//   bench_linear [threads]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant/bf16.h"
#include "core/cpu/isa.h"
#include "quant/cpu/linear.h"

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double copy_bandwidth_gbs(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);
  const int reps = 5;
  const double start = now_s();
  for (int r = 0; r < reps; ++r) std::memcpy(dst.data(), src.data(), bytes);
  const double elapsed = now_s() - start;
  return 2.0 * bytes * reps / elapsed / 1e9;  // read + write
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  moert::ThreadPool pool(threads);
  std::printf("cpu path %s, %d threads, memcpy %.1f GB/s (read+write, 256 MiB)\n", moert::cpu::cpu_isa_name(), threads,
              copy_bandwidth_gbs(256u << 20));
  // 16 experts x [1024, 1024]: 32 MiB of BF16, larger than the caches.
  const int64_t n = 1024, k = 1024, experts = 16;
  for (moert::DType dtype : {moert::DType::kBF16, moert::DType::kF32}) {
    const size_t elem = dtype == moert::DType::kBF16 ? 2 : 4;
    std::vector<char> weights(static_cast<size_t>(experts * n * k) * elem);
    for (size_t i = 0; i < weights.size() / elem; ++i) {
      const float v = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
      if (elem == 2) reinterpret_cast<uint16_t*>(weights.data())[i] = moert::quant::f32_to_bf16(v);
      else reinterpret_cast<float*>(weights.data())[i] = v;
    }
    for (int64_t rows : {1, 4, 8, 32}) {
      std::vector<float> x(static_cast<size_t>(rows * k), 0.5f), y(static_cast<size_t>(rows * n));
      const int reps = rows >= 8 ? 4 : 10;
      const double start = now_s();
      for (int r = 0; r < reps; ++r) {
        for (int64_t e = 0; e < experts; ++e) {
          const moert::TensorView w = moert::TensorView::contiguous(dtype, {n, k}, weights.data() + e * n * k * elem);
          moert::quant::linear_forward(x.data(), rows, w, nullptr, y.data(), pool);
        }
      }
      const double elapsed = now_s() - start;
      const double bytes = static_cast<double>(weights.size()) * reps;
      const double flops = 2.0 * rows * n * k * experts * reps;
      std::printf("%-4s rows %2lld: %6.1f GB/s weights, %6.1f GFLOP/s\n", elem == 2 ? "BF16" : "F32",
                  static_cast<long long>(rows), bytes / elapsed / 1e9, flops / elapsed / 1e9);
    }
  }
  return 0;
}
