#include "core/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace moert::cpu {

CpuIsa active_cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa best = CpuIsa::kPortable;
#if defined(MOERT_X86_KERNELS)
    // x86-64 builds only (the x86/ folders hold the kernels); elsewhere the portable path runs.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
      best = CpuIsa::kAvx2;
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl")) {
        best = CpuIsa::kAvx512;
      }
    }
#endif
    if (const char* cap = std::getenv("MOERT_CPU_ISA")) {
      const CpuIsa wanted = std::strcmp(cap, "portable") == 0 ? CpuIsa::kPortable
                            : std::strcmp(cap, "avx2") == 0   ? CpuIsa::kAvx2
                                                              : CpuIsa::kAvx512;
      best = std::min(best, wanted);
    }
    return best;
  }();
  return isa;
}

const char* cpu_isa_label(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kPortable: return "portable";
  }
  return "?";
}

const char* cpu_isa_name() { return cpu_isa_label(active_cpu_isa()); }

}  // namespace moert::cpu
