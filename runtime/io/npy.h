// NumPy .npy files (format versions 1.0 and 2.0) for reference logits and test arrays.
// Layout: "\x93NUMPY" | major | minor | header length (u16 LE for 1.0, u32 LE for 2.0) |
// Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with
// spaces and ended by '\n' | raw data.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace moert::io {

struct NpyArray {
  Shape shape;
  std::vector<double> values;  // row-major; values.size() == shape_numel(shape)
};

// Writes a version 1.0 file with descr '<f4', fortran_order False, the header padded so the
// data starts at a multiple of 64 bytes. `data` holds shape_numel(shape) floats (row-major).
// Writes path + ".tmp" then renames. kInvalidArgument for a negative dim, kIoError if the OS
// refuses.
Status write_npy_f32(const std::string& path, const Shape& shape, const float* data);

// Reads a little-endian '<f4' or '<f8' C-order array, versions 1.0 and 2.0. kNotFound if the
// file is missing, kUnsupported for a valid file of another dtype, byte order, Fortran
// order or version, kCorrupt if the file breaks the format (message names the path).
Result<NpyArray> read_npy(const std::string& path);

}  // namespace moert::io
