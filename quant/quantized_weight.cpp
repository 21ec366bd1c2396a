#include "quant/quantized_weight.h"

#include <cstdio>

#include <algorithm>
#include <limits>
#include <utility>
#include <string>

#include "quant/formats/fp4.h"
#include "quant/formats/fp8.h"

namespace moert::quant {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kNvfp4: return "nvfp4";
    case WeightFormat::kMxfp4: return "mxfp4";
    case WeightFormat::kFp8Block: return "fp8_block";
    case WeightFormat::kFp8Tensor: return "fp8_tensor";
  }
  return "?";
}

const char* activation_precision_name(ActivationPrecision precision) {
  switch (precision) {
    case ActivationPrecision::kF32: return "f32";
    case ActivationPrecision::kInt8: return "int8";
    case ActivationPrecision::kFp4: return "fp4";
    case ActivationPrecision::kBf16: return "bf16";
  }
  return "?";
}

Result<ActivationPrecision> parse_activation_precision(const std::string& name) {
  if (name == "f32") return ActivationPrecision::kF32;
  if (name == "int8") return ActivationPrecision::kInt8;
  if (name == "fp4") return ActivationPrecision::kFp4;
  if (name == "bf16") return ActivationPrecision::kBf16;
  return invalid_argument("'" + name + "' is not one of f32, int8, fp4, bf16");
}

Status validate_quantized_weight(const QuantizedWeightView& w) {
  // Every kernel call checks its weight (per thread and share): no string unless it fails.
  const auto where = [&] { return std::string("quantized weight (") + weight_format_name(w.format) + "): "; };
  if (w.rows < 0) return invalid_argument(where() + "rows = " + std::to_string(w.rows) + " must be >= 0");
  if (w.cols < 0) return invalid_argument(where() + "cols = " + std::to_string(w.cols) + " must be >= 0");
  int64_t block = 1;
  if (w.format == WeightFormat::kNvfp4) block = kNvfp4BlockSize;
  if (w.format == WeightFormat::kMxfp4) block = kMxfp4BlockSize;
  if (w.cols % block != 0) {
    return invalid_argument(where() + "cols = " + std::to_string(w.cols) + " must be a multiple of " +
                            std::to_string(block));
  }
  const bool fp4 = w.format == WeightFormat::kNvfp4 || w.format == WeightFormat::kMxfp4;
  if (!fp4 && w.code_order != Fp4CodeOrder::kCheckpoint) {
    return invalid_argument(where() + "the CPU code order applies to NVFP4 / MXFP4 only");
  }
  const bool fp4_activations =
      w.activations == ActivationPrecision::kInt8 || w.activations == ActivationPrecision::kFp4;
  if (!fp4 && fp4_activations) {
    return invalid_argument(where() + activation_precision_name(w.activations) +
                            " activations apply to NVFP4 / MXFP4 only");
  }
  if (fp4 && w.activations == ActivationPrecision::kBf16) {
    return invalid_argument(where() + "bf16 activations apply to FP8 only");
  }
  if (w.rows == 0 || w.cols == 0) return Status::ok();
  if (w.cols > std::numeric_limits<int64_t>::max() / w.rows) {
    return invalid_argument(where() + "rows * cols = " + std::to_string(w.rows) + " * " + std::to_string(w.cols) +
                            " overflows int64");
  }
  if (w.data == nullptr) return invalid_argument(where() + "data is null for a " + std::to_string(w.rows) + " x " +
                                                 std::to_string(w.cols) + " weight");
  if (fp4 && w.scales == nullptr) return invalid_argument(where() + "scales is null");
  if (w.format == WeightFormat::kFp8Block && w.block_scale_inv == nullptr) {
    return invalid_argument(where() + "block_scale_inv is null");
  }
  return Status::ok();
}

Status check_zero_block_scales(const QuantizedWeightView& w) {
  const int64_t n = w.rows, k = w.cols;
  auto refuse = [](int64_t bi, int64_t bj, int64_t r0, int64_t r1, int64_t c0, int64_t c1, unsigned code, int64_t i,
                   int64_t j) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02X", code);
    return invalid_argument("scale block [" + std::to_string(bi) + ", " + std::to_string(bj) + "] (rows " +
                            std::to_string(r0) + ".." + std::to_string(r1 - 1) + ", columns " + std::to_string(c0) +
                            ".." + std::to_string(c1 - 1) + ") is 0 but code " + hex + " at [" + std::to_string(i) +
                            ", " + std::to_string(j) + "] is not zero");
  };
  if (w.format == WeightFormat::kFp8Block) {
    const int64_t block_cols = (k + kFp8BlockSize - 1) / kFp8BlockSize;
    for (int64_t bi = 0; bi * kFp8BlockSize < n; ++bi) {
      for (int64_t bj = 0; bj < block_cols; ++bj) {
        if (w.block_scale_inv[bi * block_cols + bj] != 0.0f) continue;  // +0 and -0
        const int64_t r0 = bi * kFp8BlockSize, r1 = std::min(n, r0 + kFp8BlockSize);
        const int64_t c0 = bj * kFp8BlockSize, c1 = std::min(k, c0 + kFp8BlockSize);
        for (int64_t i = r0; i < r1; ++i) {
          for (int64_t j = c0; j < c1; ++j) {
            const uint8_t code = w.data[i * k + j];
            if ((code & 0x7F) != 0) return refuse(bi, bj, r0, r1, c0, c1, code, i, j);  // 0x00, 0x80: +-0
          }
        }
      }
    }
  } else if (w.format == WeightFormat::kNvfp4) {
    const int64_t blocks = k / kNvfp4BlockSize;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t b = 0; b < blocks; ++b) {
        if ((w.scales[i * blocks + b] & 0x7F) != 0) continue;  // E4M3 +-0
        const uint8_t* row = w.data + i * (k / 2);
        for (int64_t j = b * kNvfp4BlockSize; j < (b + 1) * kNvfp4BlockSize; ++j) {
          const uint8_t code = fp4_code_at(row, j, k, w.code_order);
          if ((code & 0x7) != 0) {  // E2M1 0x0, 0x8: +-0
            return refuse(i, b, i, i + 1, b * kNvfp4BlockSize, (b + 1) * kNvfp4BlockSize, code, i, j);
          }
        }
      }
    }
  }
  return Status::ok();
}

QuantizedWeightSizes quantized_weight_sizes(const QuantizedWeightView& w) {
  const int64_t n = w.rows, k = w.cols;
  switch (w.format) {
    case WeightFormat::kNvfp4: return {n * k / 2, n * (k / kNvfp4BlockSize), 0};
    case WeightFormat::kMxfp4: return {n * k / 2, n * (k / kMxfp4BlockSize), 0};
    case WeightFormat::kFp8Block:
      return {n * k, 0,
              static_cast<int64_t>(sizeof(float)) * ((n + kFp8BlockSize - 1) / kFp8BlockSize) *
                  ((k + kFp8BlockSize - 1) / kFp8BlockSize)};
    case WeightFormat::kFp8Tensor: return {n * k, 0, 0};
  }
  return {};
}

namespace {

// One full 32-element chunk (16 bytes) from checkpoint order (byte j: elements 2j, 2j + 1) to
// kCpuChunk32 (byte j: elements j, 16 + j), or back: a fixed shuffle of nibbles, written so the
// compiler vectorises it (a load-time pass over every FP4 weight; docs/perf/cpu-roofline.md).
void chunk_to_cpu_order(const uint8_t* in, uint8_t* out) {
  uint8_t e[32];
  for (int b = 0; b < 16; ++b) {
    e[2 * b] = in[b] & 0xF;
    e[2 * b + 1] = in[b] >> 4;
  }
  for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(e[j] | (e[16 + j] << 4));
}

void chunk_to_checkpoint_order(const uint8_t* in, uint8_t* out) {
  uint8_t e[32];
  for (int j = 0; j < 16; ++j) {
    e[j] = in[j] & 0xF;
    e[16 + j] = in[j] >> 4;
  }
  for (int b = 0; b < 16; ++b) out[b] = static_cast<uint8_t>(e[2 * b] | (e[2 * b + 1] << 4));
}

}  // namespace

void reorder_fp4_codes(const uint8_t* in, int64_t rows, int64_t cols, Fp4CodeOrder from, Fp4CodeOrder to,
                       uint8_t* out) {
  const int64_t row_bytes = cols / 2;
  // Only full chunks differ between the orders (fp4_code_at): a row's last partial chunk and
  // any row with the same order on both sides are copied.
  const int64_t chunk_bytes = from == to ? 0 : cols / 32 * 16;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + r * row_bytes;
    uint8_t* dst = out + r * row_bytes;
    for (int64_t b = 0; b < chunk_bytes; b += 16) {
      if (to == Fp4CodeOrder::kCpuChunk32) {
        chunk_to_cpu_order(src + b, dst + b);
      } else {
        chunk_to_checkpoint_order(src + b, dst + b);
      }
    }
    std::copy(src + chunk_bytes, src + row_bytes, dst + chunk_bytes);
  }
}

int64_t quantized_weight_bytes(const QuantizedWeightView& w) { return quantized_weight_sizes(w).total(); }

}  // namespace moert::quant
