#include "runtime/backend/reference_ops.h"

#include <cmath>

namespace moert::backend {

void reference_rms_norm(float* x, int64_t num_rows, int64_t dim, const float* weight, float eps) {
  for (int64_t t = 0; t < num_rows; ++t) {
    float* row = x + t * dim;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(row[i]) * row[i];
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) row[i] = row[i] * inv_rms * weight[i];
  }
}

int32_t reference_argmax(const float* values, int64_t count) {
  int64_t best = 0;
  for (int64_t i = 1; i < count; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace moert::backend
