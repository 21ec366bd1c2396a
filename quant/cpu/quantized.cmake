# Fused CPU kernels over packed NVFP4 / MXFP4 / FP8 weights (quantized_linear.*), included
# from quant/formats/CMakeLists.txt when present.
add_library(moert_quantized_linear STATIC ${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp
            ${CMAKE_CURRENT_LIST_DIR}/int8_linear.cpp ${CMAKE_CURRENT_LIST_DIR}/../quantized_weight.cpp)
target_link_libraries(moert_quantized_linear PUBLIC moert_formats moert_quant)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp ${CMAKE_CURRENT_LIST_DIR}/int8_linear.cpp
                            PROPERTIES COMPILE_OPTIONS "-O3")
if(MOERT_BUILD_BENCHMARKS)
  add_executable(bench_quantized_linear ${CMAKE_CURRENT_LIST_DIR}/bench/bench_quantized_linear.cpp)
  target_link_libraries(bench_quantized_linear PRIVATE moert_weight)
endif()
# x86-64 only: the AVX-512 / AVX2 tiles (x86/), picked at run time by isa.cpp; elsewhere only
# the portable path is built (same bits by design).
if(MOERT_X86_KERNELS)
  target_sources(moert_quantized_linear PRIVATE ${CMAKE_CURRENT_LIST_DIR}/x86/quantized_linear_x86.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/x86/int8_linear_x86.cpp)
  target_compile_definitions(moert_quantized_linear PRIVATE MOERT_X86_KERNELS=1)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/x86/quantized_linear_x86.cpp
                              ${CMAKE_CURRENT_LIST_DIR}/x86/int8_linear_x86.cpp PROPERTIES COMPILE_OPTIONS "-O3")
endif()
# AArch64 only: the NEON tiles (arm/), exact and int8.
if(MOERT_ARM_KERNELS)
  target_sources(moert_quantized_linear PRIVATE ${CMAKE_CURRENT_LIST_DIR}/arm/quantized_linear_neon.cpp
                 ${CMAKE_CURRENT_LIST_DIR}/arm/int8_linear_neon.cpp)
  target_compile_definitions(moert_quantized_linear PRIVATE MOERT_ARM_KERNELS=1)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/arm/quantized_linear_neon.cpp
                              ${CMAKE_CURRENT_LIST_DIR}/arm/int8_linear_neon.cpp PROPERTIES COMPILE_OPTIONS "-O3")
endif()
