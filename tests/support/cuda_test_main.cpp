// main() of the tests labelled cuda: without a visible GPU the binary reports itself skipped
// (exit 77, ctest's SKIP_RETURN_CODE for these tests) instead of passing.
#include <cstdio>
#include <string_view>

#include <gtest/gtest.h>

#include "runtime/backend/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  bool listing = false;  // ctest's test discovery lists the tests on any machine
  for (int i = 1; i < argc; ++i) listing = listing || std::string_view(argv[i]) == "--gtest_list_tests";
  if (!listing && moert::cuda::visible_device_count() == 0) {
    std::printf("no CUDA device visible: skipped\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
