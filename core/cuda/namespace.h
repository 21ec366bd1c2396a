// The namespace of the CUDA kernels and backend. The same sources build twice: for the GPU
// (nvcc, namespace moert::cuda) and for the CPU through the emulation (host compiler,
// MOERT_CUDA_EMULATION, namespace moert::cuda_emulated), so both can sit in one binary.
// No CUDA headers here: host code includes the launcher headers freely.
#pragma once

#if defined(MOERT_CUDA_EMULATION)
#define MOERT_CUDA_NS cuda_emulated
#else
#define MOERT_CUDA_NS cuda
#endif

struct CUstream_st;  // cudaStream_t without the CUDA headers
