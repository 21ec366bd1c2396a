// A float buffer reused across calls of one kernel driver on one thread. A per-call
// std::vector of a prefill's size (megabytes) is a fresh mmap whose pages are zeroed and
// faulted in on every call: that cost a 64-token BF16 prefill 40% of its rate
// (docs/perf/cpu-roofline.md, "Scratch buffers"). Declare one `thread_local` per use.
#pragma once

#include <cstddef>
#include <memory>

namespace moert {

class ReusedBuffer {
 public:
  // At least `count` floats, contents unspecified; valid until the next get() on this buffer.
  // Grows as needed; a buffer past kKeepBytes is released again by the next smaller get(), so a
  // rare huge call does not pin its memory.
  float* get(size_t count) {
    const bool too_big_to_keep = size_ * sizeof(float) > kKeepBytes && count < size_;
    if (count > size_ || too_big_to_keep) {
      data_.reset(new float[count]);
      size_ = count;
    }
    return data_.get();
  }

  static constexpr size_t kKeepBytes = size_t{256} << 20;

 private:
  std::unique_ptr<float[]> data_;
  size_t size_ = 0;
};

}  // namespace moert
