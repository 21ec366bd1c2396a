#include "core/cpu/isa.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(MOERT_X86_KERNELS)
#include <cpuid.h>
#endif
#if defined(MOERT_ARM_KERNELS)
#include <asm/hwcap.h>
#include <sys/auxv.h>
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
#if defined(MOERT_ARM_KERNELS)
    best = CpuIsa::kNeon;  // Advanced SIMD is part of every AArch64 CPU
#endif
    if (const char* cap = std::getenv("MOERT_CPU_ISA")) {
      if (std::strcmp(cap, "portable") == 0) {
        best = CpuIsa::kPortable;
      } else if (best != CpuIsa::kNeon) {
        best = std::min(best, std::strcmp(cap, "avx2") == 0 ? CpuIsa::kAvx2 : CpuIsa::kAvx512);
      }
    }
    return best;
  }();
  return isa;
}

namespace {

// An optional extension of the active path: `isa` is active, MOERT_CPU_ISA is not `off_cap`,
// and the CPU has it (has_it, asked only then).
bool extension_in_use(CpuIsa isa, const char* off_cap, bool (*has_it)()) {
  if (active_cpu_isa() != isa) return false;
  const char* cap = std::getenv("MOERT_CPU_ISA");
  return !(cap != nullptr && std::strcmp(cap, off_cap) == 0) && has_it();
}

}  // namespace

bool cpu_has_avx512_vnni() {
  static const bool vnni = extension_in_use(CpuIsa::kAvx512, "avx512-novnni", [] {
#if defined(MOERT_X86_KERNELS)
    return __builtin_cpu_supports("avx512vnni") != 0;
#else
    return false;
#endif
  });
  return vnni;
}

bool cpu_has_avx512_bf16() {
  static const bool bf16 = extension_in_use(CpuIsa::kAvx512, "avx512-nobf16", [] {
#if defined(MOERT_X86_KERNELS)
    return __builtin_cpu_supports("avx512bf16") != 0;
#else
    return false;
#endif
  });
  return bf16;
}

bool cpu_has_neon_dotprod() {
  static const bool dotprod = extension_in_use(CpuIsa::kNeon, "neon-nodot", [] {
#if defined(MOERT_ARM_KERNELS)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return false;
#endif
  });
  return dotprod;
}

const char* cpu_isa_label(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kNeon: return "neon";
    case CpuIsa::kPortable: return "portable";
  }
  return "?";
}

const char* cpu_isa_name() { return cpu_isa_label(active_cpu_isa()); }

}  // namespace moert::cpu
