// main() of the tests labelled cuda. Whether the binary runs is decided before any case runs:
// * a GPU is visible: every case runs;
// * none is (no device, no driver): the binary reports itself skipped (exit 77, ctest's
//   SKIP_RETURN_CODE for these tests), unless MOERT_EXPECT_GPU=1, which makes that a failure
//   (exit 1): the device check sets it, so that a GPU machine where CUDA sees nothing cannot
//   pass by skipping everything;
// * CUDA fails to start where a GPU node exists (cuda::probe_visible_devices): a failure
//   (exit 1), never a skip.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <gtest/gtest.h>

#include "runtime/backend/cuda/cuda_backend.h"

namespace {

bool gpu_expected() {
  const char* value = std::getenv("MOERT_EXPECT_GPU");
  return value != nullptr && std::string_view(value) == "1";
}

}  // namespace

int main(int argc, char** argv) {
  bool listing = false;  // ctest's test discovery lists the tests on any machine
  for (int i = 1; i < argc; ++i) listing = listing || std::string_view(argv[i]) == "--gtest_list_tests";
  if (!listing) {
    const moert::Result<int> devices = moert::cuda::probe_visible_devices();
    if (!devices.is_ok()) {
      std::fprintf(stderr, "FAILED: %s\n", devices.status().to_string().c_str());
      return 1;
    }
    if (*devices == 0) {
      if (gpu_expected()) {
        std::fprintf(stderr, "FAILED: MOERT_EXPECT_GPU=1 but no CUDA device is visible\n");
        return 1;
      }
      std::printf("no CUDA device visible: skipped (MOERT_EXPECT_GPU=1 makes this a failure)\n");
      return 77;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
