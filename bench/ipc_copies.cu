// ipc_copies.cu - 1 GiB copies between two processes on two GPUs of one
// host through CUDA IPC, in plain CUDA and MPI (no mpinccl): rank 0 moving
// both directions (push into rank 1's buffer and pull from it) on two
// streams or one, each rank pushing its own, each pulling the peer's, and
// one way alone.  The copy engines serve one process's two directions to
// one peer's IPC memory one after the other (twentieth session: 198 GB/s
// per copy on two streams as on one, 391 GB/s when each process pushes its
// own), which is what mpinccl's second side, moving both, meets.
// Usage: mpirun -np 2 bench/mpinccl_ipc_copies   (rank r on GPU r)
#include "mpi_probe.h"
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = 0, ndev = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2 || size != 2) {
    if (rank == 0) printf("ipc_copies: needs 2 ranks and two GPUs of one host (%d ranks, %d GPUs)\n", size, ndev);
    MPI_Finalize();
    return 2;
  }
  const size_t B = 1ull << 30;
  CK(cudaSetDevice(rank));
  void *src, *dst;
  CK(cudaMalloc(&src, B));
  CK(cudaMalloc(&dst, B));
  CK(cudaMemset(src, rank + 1, B));
  cudaIpcMemHandle_t h[2], ph[2];
  CK(cudaIpcGetMemHandle(&h[0], src));
  CK(cudaIpcGetMemHandle(&h[1], dst));
  MPI_Sendrecv(h, sizeof(h), MPI_BYTE, 1 - rank, 0, ph, sizeof(ph), MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  void *psrc, *pdst;
  CK(cudaIpcOpenMemHandle(&psrc, ph[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle(&pdst, ph[1], cudaIpcMemLazyEnablePeerAccess));
  cudaStream_t s[2];
  CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
  const char* names[] = {"rank 0 push+pull, two streams",
                         "rank 0 push+pull, one stream",
                         "each rank pushes its own",
                         "each rank pulls the peer's",
                         "rank 0 push only",
                         "rank 0 pull only"};
  for (int m = 0; m < 6; m++) {
    double best = 1e9;
    for (int rep = 0; rep < 4; rep++) {
      CK(cudaDeviceSynchronize());
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (m == 0 && rank == 0) {
        CK(cudaMemcpyAsync(pdst, src, B, cudaMemcpyDefault, s[0]));
        CK(cudaMemcpyAsync(dst, psrc, B, cudaMemcpyDefault, s[1]));
      }
      if (m == 1 && rank == 0) {
        CK(cudaMemcpyAsync(pdst, src, B, cudaMemcpyDefault, s[0]));
        CK(cudaMemcpyAsync(dst, psrc, B, cudaMemcpyDefault, s[0]));
      }
      if (m == 2) CK(cudaMemcpyAsync(pdst, src, B, cudaMemcpyDefault, s[0]));
      if (m == 3) CK(cudaMemcpyAsync(dst, psrc, B, cudaMemcpyDefault, s[0]));
      if (m == 4 && rank == 0) CK(cudaMemcpyAsync(pdst, src, B, cudaMemcpyDefault, s[0]));
      if (m == 5 && rank == 0) CK(cudaMemcpyAsync(dst, psrc, B, cudaMemcpyDefault, s[0]));
      CK(cudaDeviceSynchronize());
      double t = MPI_Wtime() - t0, tmax;
      MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (tmax < best) best = tmax;
    }
    if (rank == 0) printf("%-32s %8.1f us, %6.1f GB/s per copy\n", names[m], best * 1e6, B / best / 1e9);
  }
  MPI_Finalize();
  return 0;
}
