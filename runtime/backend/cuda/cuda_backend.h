// The CUDA backend: the Backend op table (runtime/backend/backend.h) over the kernels of
// the domain folders (core/cuda, attention/cuda, quant/cuda, experts/cuda, runtime/sampling/cuda),
// one GPU and one stream per process (docs/cuda-backend.md). No CUDA headers.
//
// Memory: allocate() returns device memory from the stream-ordered pool. Every array
// argument names its device (core/device.h): this GPU's memory passes through; host arrays
// (index arrays the model builds on the host, tests' vectors) are staged to the device for
// the call and host outputs copied back before the op returns; another device's memory
// fails the op. Weights are uploaded when placed (prepare_weights: the regions this rank
// computes with; place_host_weights) and stay resident; host weights never placed are staged
// per call.
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

// The number of visible CUDA devices, telling "nothing to see" from "CUDA failed to start":
// 0 when the runtime reports no device (cudaErrorNoDevice: no GPU, or CUDA_VISIBLE_DEVICES
// hides them) or fails on a machine with no /dev/nvidiaN node (no GPU there to start); an
// error naming the CUDA error when it fails while such a node exists (a driver older than the
// runtime, a broken install): a start-up error, which tests report as a failure, never a skip.
Result<int> probe_visible_devices();

}  // namespace moert::MOERT_CUDA_NS
