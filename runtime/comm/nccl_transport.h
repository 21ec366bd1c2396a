// NCCL transport over device buffers (built only when MOERT_HAVE_NCCL; link
// moert_comm_nccl). all_reduce, broadcast, gather and all_to_all_v take CUDA device
// pointers and run on one stream: all_to_all_v as grouped ncclSend/ncclRecv, whose wait()
// synchronizes the stream. gatherv, all_to_all_counts, barrier and abort use host memory
// and go through the bootstrap transport.
//
// This header names no CUDA or NCCL type: the stream is passed as CUstream_st*, which is
// what cudaStream_t is.
#pragma once

#include <memory>

#include "runtime/comm/transport.h"
#include "core/status.h"

struct CUstream_st;

namespace moert::comm {

struct NcclTransportOptions {
  // CUDA device of this rank. Default -1: the calling thread's current device.
  int device = -1;
  // Stream the operations run on. Default nullptr: the transport creates and owns a
  // non-blocking stream. A stream passed in must outlive the transport.
  CUstream_st* stream = nullptr;
};

// Number of CUDA devices this process sees; 0 when the driver reports an error (no GPU).
int cuda_device_count();

// Collective over `bootstrap` (a host transport, e.g. make_mpi_transport(), that must
// outlive the result): rank 0 creates the NCCL unique id, bootstrap broadcasts it, and
// every rank calls ncclCommInitRank with bootstrap's rank and world size. A failure on
// any rank before ncclCommInitRank is returned on every rank (no rank hangs in init).
Result<std::unique_ptr<Transport>> make_nccl_transport(Transport& bootstrap,
                                                       const NcclTransportOptions& options = {});

}  // namespace moert::comm
