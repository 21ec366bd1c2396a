# Fused CPU kernels over packed NVFP4 / MXFP4 / FP8 weights (quantized_linear.*), included
# from quant/formats/CMakeLists.txt when present.
add_library(moert_quantized_linear STATIC ${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp
            ${CMAKE_CURRENT_LIST_DIR}/int8_linear.cpp ${CMAKE_CURRENT_LIST_DIR}/bf16_linear.cpp
            ${CMAKE_CURRENT_LIST_DIR}/../quantized_weight.cpp)
target_link_libraries(moert_quantized_linear PUBLIC moert_formats moert_quant)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp ${CMAKE_CURRENT_LIST_DIR}/int8_linear.cpp
                            ${CMAKE_CURRENT_LIST_DIR}/bf16_linear.cpp
                            PROPERTIES COMPILE_OPTIONS "-O3")
if(MOERT_BUILD_BENCHMARKS)
  add_executable(bench_quantized_linear ${CMAKE_CURRENT_LIST_DIR}/bench/bench_quantized_linear.cpp)
  target_link_libraries(bench_quantized_linear PRIVATE moert_weight)
endif()
# x86-64 only: the AVX-512 / AVX2 tiles (x86/), picked at run time by isa.cpp; AArch64 only:
# the NEON tiles (arm/), exact and int8; elsewhere only the portable path is built (same bits
# by design).
moert_isa_kernels(moert_quantized_linear X86 SOURCES ${CMAKE_CURRENT_LIST_DIR}/x86/quantized_linear_x86.cpp
                  ${CMAKE_CURRENT_LIST_DIR}/x86/int8_linear_x86.cpp ${CMAKE_CURRENT_LIST_DIR}/x86/bf16_linear_x86.cpp)
moert_isa_kernels(moert_quantized_linear ARM SOURCES ${CMAKE_CURRENT_LIST_DIR}/arm/quantized_linear_neon.cpp
                  ${CMAKE_CURRENT_LIST_DIR}/arm/int8_linear_neon.cpp)
