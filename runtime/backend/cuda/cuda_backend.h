// The CUDA backend: the Backend op table (runtime/backend/backend.h) over the kernels of
// the domain folders (core/cuda, attention/cuda, quant/cuda, experts/cuda, runtime/sampling/cuda),
// one GPU and one stream per process (docs/cuda-backend.md). No CUDA headers.
//
// Memory: allocate() returns device memory from the stream-ordered pool. Every op also
// accepts host memory wherever the table says "device" (index arrays such as tokens,
// positions, slots, plans and expert ids are host data in the model; tests pass host
// vectors): host inputs are staged to the device for the call, host outputs copied back
// before the op returns. Weights the model registered (register_host_weights) are uploaded
// once, on first use, and stay resident; unregistered host weights are staged per call.
// Ops run asynchronously on the stream; those that hand results to the host (to_host,
// route, argmax_rows, copy_bytes, any op with a host output) synchronise before returning.
//
// The same source builds for the GPU (namespace moert::cuda) and for the CPU through the
// emulation (moert::cuda_emulated, name "cuda-emulated"), which the conformance harness runs
// on every machine.
#pragma once

#include <memory>

#include "core/status.h"
#include "runtime/backend/backend.h"
#include "core/cuda/namespace.h"

namespace moert::MOERT_CUDA_NS {

// A backend on GPU `device_index` (modulo the number of visible devices, so that local rank
// r of a node uses GPU r % count). kUnsupported when no GPU is visible.
Result<std::unique_ptr<backend::Backend>> make_cuda_backend(int device_index);

// Number of visible CUDA devices (0 without a driver or a device).
int visible_device_count();

}  // namespace moert::MOERT_CUDA_NS
