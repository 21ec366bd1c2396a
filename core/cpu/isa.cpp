#include "core/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(MOERT_X86_KERNELS)
#include <cpuid.h>
#endif

namespace moert::cpu {
namespace {

#if defined(MOERT_X86_KERNELS)
// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
#endif

}  // namespace

CpuIsa active_cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa best = CpuIsa::kPortable;
#if defined(MOERT_X86_KERNELS)
    // x86-64 builds only (the x86/ folders hold the kernels); elsewhere the portable path runs.
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) {
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

bool cpu_has_avx512_vnni() {
  static const bool vnni = [] {
    if (active_cpu_isa() != CpuIsa::kAvx512) return false;
    const char* cap = std::getenv("MOERT_CPU_ISA");
    if (cap != nullptr && std::strcmp(cap, "avx512-novnni") == 0) return false;
#if defined(MOERT_X86_KERNELS)
    return __builtin_cpu_supports("avx512vnni") != 0;
#else
    return false;
#endif
  }();
  return vnni;
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
