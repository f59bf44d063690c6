// The emulated NCCL (nccl.h), over MPI.
#include "nccl.h"

#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "emulated_backend.h"

struct EmulatedNcclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::atomic<bool> aborted{false};  // ncclCommAbort: collectives stop waiting for peers
};

namespace {

constexpr char kTag[] = "dendrite-emulated-nccl";

size_t type_bytes(ncclDataType_t t) { return t == ncclBfloat16 ? 2 : t == ncclFloat32 ? 4 : 8; }

ncclResult_t refuse(const std::string& why) {
  std::fprintf(stderr, "nccl emulator: %s\n", why.c_str());
  return ncclInvalidArgument;
}

bool device_range(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  cudaPointerAttributes a{}, b{};
  cudaPointerGetAttributes(&a, p);
  cudaPointerGetAttributes(&b, static_cast<const char*>(p) + bytes - 1);
  return a.type == cudaMemoryTypeDevice && b.type == cudaMemoryTypeDevice;
}

// Completes r, unless the communicator is aborted first (false: r is left).
bool complete(MPI_Request& r, const EmulatedNcclComm& c) {
  for (;;) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (c.aborted.load()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Every rank's `bytes` from `send`, in rank order (false: aborted).
bool gather_all(const void* send, size_t bytes, const EmulatedNcclComm& c,
                std::vector<unsigned char>& all) {
  all.resize(bytes * size_t(c.size));
  MPI_Request r;
  MPI_Iallgather(send, int(bytes), MPI_BYTE, all.data(), int(bytes), MPI_BYTE, c.comm, &r);
  return complete(r, c);
}

// Runs a collective's work on stream s, in its order, as NCCL's kernels run.
ncclResult_t on_stream(cudaStream_t s, std::function<void()> work) {
  emu::carries_collectives(s);
  emu::submit(s, std::move(work));
  return ncclSuccess;
}

// out[i] = the sum over ranks r of all[r][first + i], i < count, in rank order.
void sum(const std::vector<unsigned char>& all, size_t whole, size_t first, size_t count,
         ncclDataType_t t, int ranks, void* out) {
  const size_t eb = type_bytes(t);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = (first + i) * eb;
    if (t == ncclFloat64) {
      double s = 0, v;
      for (int r = 0; r < ranks; ++r) std::memcpy(&v, &all[r * whole + at], 8), s += v;
      std::memcpy(static_cast<char*>(out) + i * eb, &s, 8);
    } else if (t == ncclInt64) {
      int64_t s = 0, v;
      for (int r = 0; r < ranks; ++r) std::memcpy(&v, &all[r * whole + at], 8), s += v;
      std::memcpy(static_cast<char*>(out) + i * eb, &s, 8);
    } else if (t == ncclFloat32) {
      float s = 0, v;
      for (int r = 0; r < ranks; ++r) std::memcpy(&v, &all[r * whole + at], 4), s += v;
      std::memcpy(static_cast<char*>(out) + i * eb, &s, 4);
    } else {  // bf16: summed in fp32, rounded to nearest-even once
      float s = 0;
      for (int r = 0; r < ranks; ++r) {
        uint16_t h;
        std::memcpy(&h, &all[r * whole + at], 2);
        s += __uint_as_float(uint32_t(h) << 16);
      }
      uint32_t u = __float_as_uint(s);
      if ((u & 0x7fffffffu) > 0x7f800000u)
        u = (u >> 16) | 0x40;
      else
        u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const uint16_t h = uint16_t(u);
      std::memcpy(static_cast<char*>(out) + i * eb, &h, 2);
    }
  }
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result";
}
const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> drawn{0};
  *id = ncclUniqueId{};
  std::snprintf(id->internal, sizeof id->internal, "%s-%ld-%llu", kTag, long(getpid()),
                static_cast<unsigned long long>(drawn++));
  return ncclSuccess;
}

namespace {
std::atomic<int> communicators_made{0};
std::atomic<int> groups_alive{0};  // communicators of several ranks, made and not destroyed
}  // namespace

int emu::nccl_communicators_made() { return communicators_made.load(); }

ncclResult_t ncclGetVersion(int* version) {
  *version = 22809;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  communicators_made.fetch_add(1);
  // A second communicator of several ranks on this process's GPU: its
  // kernels and the first's, on streams of their own, could start in other
  // orders on other ranks and deadlock, unless NCCL orders them as the host
  // issued them.
  const char* implicit = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
  if (nranks > 1 && groups_alive.load() > 0 && !(implicit && std::strcmp(implicit, "1") == 0))
    return refuse(
        "ncclCommInitRank: a second communicator of several ranks on this GPU, with "
        "NCCL_LAUNCH_ORDER_IMPLICIT not 1: the two communicators' kernels could run in "
        "other orders on other ranks and deadlock");
  if (std::strncmp(id.internal, kTag, sizeof kTag - 1) != 0)
    return refuse("ncclCommInitRank: the unique id was not drawn by ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return refuse("ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                  std::to_string(nranks));
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  // The members meet in a segment named by the id: each writes its world rank + 1.
  const std::string name = std::string("/") + id.internal;
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return refuse("ncclCommInitRank: shm_open " + name + " failed");
  const size_t bytes = sizeof(std::atomic<int>) * size_t(nranks);
  if (ftruncate(fd, off_t(bytes)) != 0) {
    close(fd);
    return refuse("ncclCommInitRank: ftruncate failed");
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return refuse("ncclCommInitRank: mmap failed");
  auto* slots = static_cast<std::atomic<int>*>(map);
  slots[rank].store(world_rank + 1);
  std::vector<int> members(size_t(nranks), 0);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (int r = 0; r < nranks; ++r) {
    while ((members[size_t(r)] = slots[r].load()) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        munmap(map, bytes);
        return refuse("ncclCommInitRank: rank " + std::to_string(r) + " never arrived");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    members[size_t(r)] -= 1;
  }
  auto* c = new EmulatedNcclComm;
  c->rank = rank, c->size = nranks;
  MPI_Group world, group;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, nranks, members.data(), &group);
  MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  MPI_Barrier(c->comm);  // everyone has read the segment
  munmap(map, bytes);
  if (rank == 0) shm_unlink(name.c_str());
  *out = c;
  if (nranks > 1) groups_alive.fetch_add(1);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm) {
    if (comm->size > 1) groups_alive.fetch_sub(1);
    MPI_Comm_free(&comm->comm);
    delete comm;
  }
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm) comm->aborted.store(true);  // its collectives stop; the job ends next
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t* async) {
  *async = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  const size_t bytes = count * type_bytes(type);
  if (!comm || op != ncclSum) return refuse("ncclAllReduce: no communicator, or not a sum");
  if (!device_range(send, bytes) || !device_range(recv, bytes))
    return refuse("ncclAllReduce: a buffer is not device memory");
  return on_stream(s, [=] {
    std::vector<unsigned char> all;
    if (gather_all(send, bytes, *comm, all)) sum(all, bytes, 0, count, type, comm->size, recv);
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  const size_t part = count * type_bytes(type), whole = part * size_t(comm ? comm->size : 1);
  if (!comm || op != ncclSum) return refuse("ncclReduceScatter: no communicator, or not a sum");
  if (!device_range(send, whole) || !device_range(recv, part))
    return refuse("ncclReduceScatter: a buffer is not device memory");
  return on_stream(s, [=] {
    std::vector<unsigned char> all;
    if (gather_all(send, whole, *comm, all))
      sum(all, whole, size_t(comm->rank) * count, count, type, comm->size, recv);
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t s) {
  const size_t part = count * type_bytes(type);
  if (!comm) return refuse("ncclAllGather: no communicator");
  if (!device_range(send, part) || !device_range(recv, part * size_t(comm->size)))
    return refuse("ncclAllGather: a buffer is not device memory");
  return on_stream(s, [=] {
    std::vector<unsigned char> all;
    if (gather_all(send, part, *comm, all) && !all.empty())
      std::memcpy(recv, all.data(), all.size());
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s) {
  const size_t bytes = count * type_bytes(type);
  if (!comm || root < 0 || root >= comm->size) return refuse("ncclBroadcast: bad root");
  if ((comm->rank == root && !device_range(send, bytes)) || !device_range(recv, bytes))
    return refuse("ncclBroadcast: a buffer is not device memory");
  return on_stream(s, [=] {
    if (comm->rank == root && send != recv && bytes) std::memmove(recv, send, bytes);
    MPI_Request r;
    MPI_Ibcast(recv, int(bytes), MPI_BYTE, root, comm->comm, &r);
    complete(r, *comm);
  });
}
