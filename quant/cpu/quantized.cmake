# Fused CPU kernels over packed NVFP4 / MXFP4 / FP8 weights (quantized_linear.*), included
# from quant/formats/CMakeLists.txt when present.
add_library(moert_quantized_linear STATIC ${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp)
target_link_libraries(moert_quantized_linear PUBLIC moert_formats moert_quant)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/quantized_linear.cpp PROPERTIES COMPILE_OPTIONS "-O3")
add_executable(bench_quantized_linear ${CMAKE_CURRENT_LIST_DIR}/bench/bench_quantized_linear.cpp)
target_link_libraries(bench_quantized_linear PRIVATE moert_quantized_linear)
