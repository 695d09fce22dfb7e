/*
 * bench_net.h - the floors of the UCX path (device data staged through
 * pinned host memory and sent with UCX), measured with plain CUDA, UCX and
 * MPI at the start of a run (no mpinccl): the pinned device-to-host and
 * host-to-device copy rates of one stream, the UCX host-to-host bandwidth
 * one way and both ways at once (the floor of an exchange in which both
 * ranks send), and UCX's own 8-byte put latency between ranks 0 and 1.  Built where UCX
 * is (BENCH_HAVE_UCX); elsewhere --net reports them as not measured.
 */
#ifndef BENCH_NET_H_
#define BENCH_NET_H_

#include <mpi.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int measured;      /**< 0: not measured (see reason) */
  size_t bytes;      /**< bytes of each copy and transfer */
  double d2h_gbps;   /**< pinned device-to-host copy, one stream, best of 3, rank 0 */
  double h2d_gbps;   /**< pinned host-to-device copy, one stream, best of 3, rank 0 */
  double ucx_gbps;   /**< UCX tagged transfer of host memory, rank 0 to rank 1, best of 3 */
  double ucx_both_gbps; /**< the same both ways at once (0 to 1 and 1 to 0), summed, best of 3 */
  double put_us;     /**< UCX put of 8 bytes, one way (ping-pong round trip / 2), ranks 0-1 */
  double slowest_gbps; /**< the smallest of the copy rates and ucx_gbps (one message in flight) */
  double slowest_both_gbps; /**< the smallest of the copy rates and ucx_both_gbps (both ways) */
  char reason[160];  /**< why not measured */
} bench_net_t;

/**
 * Measures the floors (collective over comm, each rank's device current).
 * The copies are rank 0's alone; the UCX figures need ranks 0 and 1 (the
 * others wait).  UCX's own configuration (UCX_TLS, ...) applies.
 */
void bench_net_measure(MPI_Comm comm, size_t bytes, bench_net_t* out);

/** The CUDA half alone (bench_net_measure calls it): rank 0's copy rates. */
void bench_net_copies(MPI_Comm comm, size_t bytes, bench_net_t* out);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_NET_H_ */
