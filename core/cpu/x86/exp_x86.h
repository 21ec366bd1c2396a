// AVX-512 and AVX2 paths of core/cpu/exp.h's exp_shifted (x86-64 builds only). Call a path
// only when active_cpu_isa() selects it.
#pragma once

#include <cstdint>

namespace moert::cpu::x86 {

void exp_shifted_avx512(float* values, int64_t n, float shift);
void exp_shifted_avx2(float* values, int64_t n, float shift);

}  // namespace moert::cpu::x86
