// Internal to quant/formats: argument checks shared by the matrix quantizers.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/status.h"

namespace moert::quant::formats_detail {

// [rows, cols] row-major. `block_cols` > 0 is the block width that must divide cols (1 when
// any width is allowed).
inline Status check_matrix_shape(const char* fn, int64_t rows, int64_t cols, int64_t block_cols) {
  const std::string where = std::string(fn) + ": ";
  if (rows < 0) return invalid_argument(where + "rows = " + std::to_string(rows) + " must be >= 0");
  if (cols < 0) return invalid_argument(where + "cols = " + std::to_string(cols) + " must be >= 0");
  if (cols % block_cols != 0) {
    return invalid_argument(where + "cols = " + std::to_string(cols) + " must be a multiple of " +
                            std::to_string(block_cols));
  }
  if (rows > 0 && cols > std::numeric_limits<int64_t>::max() / rows) {
    return invalid_argument(where + "rows * cols = " + std::to_string(rows) + " * " + std::to_string(cols) +
                            " overflows int64");
  }
  return Status::ok();
}

// check_matrix_shape plus: x may be null only for an empty matrix.
inline Status check_matrix_args(const char* fn, const float* x, int64_t rows, int64_t cols,
                                int64_t block_cols) {
  MOERT_RETURN_IF_ERROR(check_matrix_shape(fn, rows, cols, block_cols));
  if (x == nullptr && rows * cols > 0) {
    return invalid_argument(std::string(fn) + ": x is null for a non-empty matrix");
  }
  return Status::ok();
}

inline std::string index_name(int64_t flat, int64_t cols) {
  return "x[" + std::to_string(flat / cols) + ", " + std::to_string(flat % cols) + "]";
}

}  // namespace moert::quant::formats_detail
