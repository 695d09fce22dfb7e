/*
 * nccl_program.c - a program written for NCCL, using communicator calls only;
 * built by test_install.sh against the installed prefix with -lnccl.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>

#define CHECK(call) \
  do { \
    ncclResult_t r_ = (call); \
    if (r_ != ncclSuccess) { \
      fprintf(stderr, "%s failed: %s\n", #call, ncclGetErrorString(r_)); \
      MPI_Abort(MPI_COMM_WORLD, 1); \
    } \
  } while (0)

int main(int argc, char** argv) {
  int rank, size, ndev = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) cudaSetDevice(rank % ndev);
  ncclUniqueId id;
  if (rank == 0) CHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm, half;
  CHECK(ncclCommInitRank(&comm, size, id, rank));
  int n, r, dev;
  CHECK(ncclCommCount(comm, &n));
  CHECK(ncclCommUserRank(comm, &r));
  CHECK(ncclCommCuDevice(comm, &dev));
  CHECK(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
  int hn, hr;
  CHECK(ncclCommCount(half, &hn));
  CHECK(ncclCommUserRank(half, &hr));
  int ok = n == size && r == rank && hn == (size + 1 - rank % 2) / 2 && hr == rank / 2;
  int version;
  CHECK(ncclGetVersion(&version));
  printf("rank %d/%d: device %d, split rank %d/%d, NCCL version code %d: %s\n", r, n, dev, hr, hn,
         version, ok ? "ok" : "WRONG");
  CHECK(ncclCommDestroy(half));
  CHECK(ncclCommDestroy(comm));
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all ? 0 : 1;
}
