/*
 * device.h - CUDA device queries used at communicator creation.  Every call
 * copes with a machine that has no GPU or no driver: it reports "no device"
 * instead of failing, so host-only communicators can be created.
 */
#ifndef MPN_CUDA_DEVICE_H_
#define MPN_CUDA_DEVICE_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

struct ncclComm;

typedef struct {
  unsigned char uuid[16];
  char pci_bus[16]; /**< "0000:8a:00.0" */
  int mps;          /**< contexts on this device go through MPS */
  int cc;           /**< compute capability, major*10+minor */
} mpn_cuda_info_t;

/** Number of usable CUDA devices; 0 without a GPU or driver. */
int mpn_cuda_device_count(void);

/** The calling thread's current device, or -1 when there is no GPU. */
int mpn_cuda_current_device(void);

/** Makes dev the calling thread's current device; a failure is reported as
 * by mpn_cuda_result (so not left in CUDA's last error). */
ncclResult_t mpn_cuda_set_device(int dev);

/** Creates dev's primary context now if dev is the calling thread's current
 * device (switching devices could create another context): the driver may
 * write the environment while it does. */
void mpn_cuda_context_start(int dev);

/**
 * The id of the calling thread's current context (the primary context of
 * its current device, made now if it is not), unique for the life of the
 * process (cuCtxGetId): a device reset by the program (cudaDeviceReset)
 * gets a new one.  0 when CUDA cannot tell.
 */
unsigned long long mpn_cuda_context_id(void);

/** A CUDA runtime result as an ncclResult_t: a failure is recorded (for
 * comm, which may be NULL) as "<what> failed: <CUDA's text>", logged at WARN,
 * and CUDA's last error is cleared. */
ncclResult_t mpn_cuda_result(struct ncclComm* comm, cudaError_t err, const char* what);

/** After a call of the library's that returned err, clears the runtime's
 *  last error if that call set it (not for a success, nor for a query's
 *  cudaErrorNotReady, which the runtime does not record): an error of the
 *  program's own that it has not read yet stays for its cudaGetLastError. */
static inline void mpn_cuda_forget(cudaError_t err) {
  if (err != cudaSuccess && err != cudaErrorNotReady) cudaGetLastError();
}

/** Pinned host memory mapped for the GPU, zeroed: *host and its device
 * address *dev; on failure nothing is held (*host NULL). */
cudaError_t mpn_cuda_host_mapped(size_t bytes, void** host, CUdeviceptr* dev);

/** Describes device dev. */
ncclResult_t mpn_cuda_device_info(int dev, mpn_cuda_info_t* out);

/** Sets bus (16 bytes) to device dev's PCI bus id, lower case ("0000:8a:00.0"). */
ncclResult_t mpn_cuda_bus_id(int dev, char bus[16]);

/** True when devices a and b of this process can each map the other's
 * memory (peer access both ways, so that ranks on either choose alike). */
int mpn_cuda_peer_capable(int a, int b);

/** Lets kernels, memory operations and copies of device dev reach peer's
 * memory through plain pointers (peer access already on is fine); the
 * calling thread's current device is kept. */
ncclResult_t mpn_cuda_peer_enable(int dev, int peer);

/**
 * Makes dev current for what follows, with *current the device the caller
 * knows to be current (-1: unknown); calls into CUDA only when it changes,
 * since a launch may visit the same device for every message.
 */
static inline void mpn_cuda_switch_device(int* current, int dev) {
  if (*current == dev) return;
  mpn_cuda_forget(cudaSetDevice(dev));
  *current = dev;
}

/**
 * Makes dev (when >= 0) the calling thread's current device for a while;
 * returns the device that was current (-1: none), for
 * mpn_cuda_device_leave.  Library calls that touch another device than the
 * caller's leave the caller's current device as it was.  These helpers
 * forget their own failures, so that their callers need no clear of their
 * own, which would also take an unread error of the program's.
 */
static inline int mpn_cuda_device_enter(int dev) {
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess) {
    cudaGetLastError();
    saved = -1;
  }
  if (dev >= 0 && dev != saved) mpn_cuda_forget(cudaSetDevice(dev));
  return saved;
}

/** Makes saved (from mpn_cuda_device_enter) current again, if it is not. */
static inline void mpn_cuda_device_leave(int saved) {
  if (saved < 0) return;
  int now = -1;
  cudaError_t err = cudaGetDevice(&now);
  mpn_cuda_forget(err);
  if (err != cudaSuccess || now != saved) mpn_cuda_forget(cudaSetDevice(saved));
}

/** A thread's capture mode, as mpn_cuda_relaxed_enter found it. */
typedef struct {
  enum cudaStreamCaptureMode mode;
  int set; /**< the exchange took: mpn_cuda_relaxed_leave gives mode back */
} mpn_capture_mode_t;

/**
 * Makes the calling thread's capture mode relaxed.  One of its streams may
 * be capturing a graph, and the calls that follow (allocations, IPC, event
 * and stream queries, user objects) are not part of it: in the default
 * mode the capture would refuse them and be invalidated.  Pair with
 * mpn_cuda_relaxed_leave.  A refused exchange is forgotten (no clear of the
 * caller's need cover it).
 */
static inline mpn_capture_mode_t mpn_cuda_relaxed_enter(void) {
  mpn_capture_mode_t m = {cudaStreamCaptureModeRelaxed, 0};
  cudaError_t err = cudaThreadExchangeStreamCaptureMode(&m.mode);
  mpn_cuda_forget(err);
  m.set = err == cudaSuccess;
  return m;
}

/** Gives the thread the capture mode mpn_cuda_relaxed_enter found. */
static inline void mpn_cuda_relaxed_leave(mpn_capture_mode_t m) {
  if (m.set) mpn_cuda_forget(cudaThreadExchangeStreamCaptureMode(&m.mode));
}

/**
 * Has fn(arg) called once the graph being captured on stream s is destroyed,
 * with every executable graph made from it (a CUDA user object the graph
 * holds).  fn runs on a thread of CUDA's: it must neither call CUDA nor wait
 * for anything.  On failure (s not capturing, CUDA refused) fn is never
 * called and an error is returned.
 */
ncclResult_t mpn_cuda_capture_on_destroy(cudaStream_t s, void (*fn)(void*), void* arg);

/**
 * An identity of stream s that no other stream of the program shares, even
 * one created after s is destroyed at the same handle, and that resolves
 * the per-thread and legacy default streams to the stream they name here
 * (cudaStreamGetId).  Should the runtime refuse, the handle itself (with the
 * top bit set, apart from the runtime's numbers).  Never for a stream being
 * captured (the query ends the capture); asked in relaxed capture mode, so
 * that another thread's capture goes on.
 */
unsigned long long mpn_cuda_stream_id(cudaStream_t s);

#endif /* MPN_CUDA_DEVICE_H_ */
