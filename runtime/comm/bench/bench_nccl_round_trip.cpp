// The expert-parallel exchange on one GPU through NCCL, against a device copy of the same bytes
// measured in the same run (docs/expert-parallel-gpu.md; scripts/device-check.sh): a world of
// one rank (the self transport bootstraps NCCL) sends `tokens` rows of `hidden` elements of
// `element_bytes` each to itself (dispatch) and back (combine), as ExpertParallelExperts does
// through the NCCL transport. Prints one JSON line:
//   {"tokens", "hidden", "element_bytes", "bytes", "round_trip_s", "copy_s", "ratio"}
// where copy_s is one cudaMemcpy (device to device) of `bytes` and ratio = round_trip_s / (2 copy_s):
// a round trip moves the bytes twice.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/comm/nccl_transport.h"
#include "runtime/comm/self_transport.h"
#include "core/cuda/bench/bench_timing.h"

namespace {

#define CHECK_CUDA MOERT_BENCH_CHECK_CUDA
using moert::gpu_bench::int_arg;
using moert::gpu_bench::seconds_per_call;

void check(const moert::Status& status, const char* what) {
  if (!status.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long long tokens = int_arg(argc, argv, "--tokens", 4096), hidden = int_arg(argc, argv, "--hidden", 7168);
  const long long element_bytes = int_arg(argc, argv, "--element-bytes", 2);
  const int repeats = static_cast<int>(int_arg(argc, argv, "--repeats", 20));
  const long long bytes = tokens * hidden * element_bytes;
  std::unique_ptr<moert::comm::Transport> bootstrap = moert::comm::make_self_transport();
  moert::Result<std::unique_ptr<moert::comm::Transport>> nccl = moert::comm::make_nccl_transport(*bootstrap);
  check(nccl.status(), "make_nccl_transport");
  void *rows = nullptr, *received = nullptr;
  CHECK_CUDA(cudaMalloc(&rows, static_cast<size_t>(bytes)));
  CHECK_CUDA(cudaMalloc(&received, static_cast<size_t>(bytes)));
  CHECK_CUDA(cudaMemset(rows, 0x3c, static_cast<size_t>(bytes)));
  const std::vector<int64_t> counts{bytes};
  const double round_trip_s = seconds_per_call(
      [&] {
        check((*nccl)->start_all_to_all_v(rows, counts, received, counts)->wait(), "dispatch");
        check((*nccl)->start_all_to_all_v(received, counts, rows, counts)->wait(), "combine");
      },
      repeats);
  const double copy_s = seconds_per_call(
      [&] {
        CHECK_CUDA(cudaMemcpy(received, rows, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice));
      },
      repeats);
  std::printf(
      "{\"tokens\": %lld, \"hidden\": %lld, \"element_bytes\": %lld, \"bytes\": %lld, \"round_trip_s\": %.6e, "
      "\"copy_s\": %.6e, \"ratio\": %.3f}\n",
      tokens, hidden, element_bytes, bytes, round_trip_s, copy_s, round_trip_s / (2.0 * copy_s));
  CHECK_CUDA(cudaFree(rows));
  CHECK_CUDA(cudaFree(received));
  return 0;
}
