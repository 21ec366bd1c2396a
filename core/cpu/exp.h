// exp for float with one fixed definition on every path, so that a softmax gives the same
// bits whatever the instruction set, and the vector paths can replace a call per element.
//
// Definition (docs/kv-cache.md "The exponential"): in double, x = (k + r) / 32 * ln 2 with k
// an integer and |r| <= 1/2; 2^(k/32) from a 32-entry table of 2^(i/32) with k / 32's integer
// part added to the exponent; 2^(r/32) by a cubic; each step one FMA or one product, rounded
// once to float at the end. Special inputs: NaN stays NaN, +inf and x > 88.72 give +inf,
// -inf and x < -103.97 give 0, x in [-103.97, -103.28) gives the smallest subnormal. These are
// the operations of glibc's expf (since 2.28) as built with FMA, so on glibc x86-64 with FMA
// exp_f32(x) == std::exp(x) for every float (checked over all floats when the suite runs
// there); elsewhere it is simply this function (within 1 ulp of the true value).
#pragma once

#include <cstdint>

namespace moert::cpu {

float exp_f32(float x);

// values[i] = exp_f32(values[i] - shift) for i < n, in place (the softmax numerator), on the
// instruction-set path of core/cpu/isa.h; every path gives exp_f32's bits.
void exp_shifted(float* values, int64_t n, float shift);

}  // namespace moert::cpu
