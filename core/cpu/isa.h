// The CPU instruction-set path of the kernels, chosen once per process: on x86-64 AVX-512
// (F+BW+VL), AVX2 with FMA and F16C, or portable C++; on AArch64 NEON (always present there)
// or portable C++. MOERT_CPU_ISA=portable|avx2|avx512 caps it on x86-64 (portable on
// AArch64): tests and benchmarks compare the paths; results are bit-identical by design.
// The SIMD paths exist only in their targets' builds (core/cpu/x86 and arm, quant/cpu/x86 and
// arm, attention/cpu/x86); elsewhere this is kPortable.
#pragma once

namespace moert::cpu {

enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };

CpuIsa active_cpu_isa();
const char* cpu_isa_label(CpuIsa isa);  // "portable", "avx2", "avx512", "neon"
// AVX-512 VNNI (vpdpbusd) is present and active_cpu_isa() is kAvx512: the int8 dot products
// of quant/cpu/int8_linear.h use it (same bits as without; MOERT_CPU_ISA=avx512-novnni turns
// it off so tests reach the other AVX-512 variant).
bool cpu_has_avx512_vnni();
// AVX-512 BF16 (vdpbf16ps) is present and active_cpu_isa() is kAvx512: the bf16-activation mode
// of the FP8 weights (quant/cpu/bf16_linear.h) uses it; without it that mode computes the same
// bits by FMA (MOERT_CPU_ISA=avx512-nobf16 turns it off).
bool cpu_has_avx512_bf16();
// The Armv8.2 dot-product instructions (sdot) are present and active_cpu_isa() is kNeon; the
// same use and the same bits as above (MOERT_CPU_ISA=neon-nodot turns it off).
bool cpu_has_neon_dotprod();
// cpu_isa_label(active_cpu_isa()): the path every CPU kernel takes in this process.
const char* cpu_isa_name();

}  // namespace moert::cpu
