// NCCL as the CUDA emulator gives it (tests only; see cuda_runtime.h): the
// calls of the NCCL transport (src/dendrite/comm/nccl), run over MPI among
// the processes of the job, so that its code runs where no GPU is.
//
// A communicator is made from a unique id that one rank draws and the others
// receive (ncclCommInitRank): the members meet through a shared-memory
// segment named by the id, then make an MPI communicator of their world
// ranks in NCCL rank order. Every collective checks that its buffers are
// device memory when it is called and runs in its stream's order (at once, or
// on the stream's thread: emulated_backend.h, set_streams), over nonblocking
// MPI calls that ncclCommAbort ends. Sums go through every rank's whole
// buffer in rank order, in fp32 for fp32 and bf16 (bf16 rounded once, at the
// end), fp64 and int64 as themselves.
#pragma once

#include <cstddef>

#include "cuda_runtime.h"

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t { ncclInt64 = 4, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 };
enum ncclRedOp_t { ncclSum = 0 };
struct ncclUniqueId {
  char internal[128];
};
using ncclComm_t = struct EmulatedNcclComm*;

// 22809: the version of the toolkit's NCCL this emulates (2.28.9).
ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t r);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async);
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream);
