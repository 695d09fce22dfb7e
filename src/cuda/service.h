/*
 * service.h - each device's service stream: one non-blocking stream of the
 * library's own per process and device, for short jobs that wait for no
 * other stream (zeroing memory the library just allocated, reading marks,
 * writing flags at a release), instead of a stream created and destroyed
 * for each.  It is made at a communicator's creation, outside any launch.
 */
#ifndef MPN_CUDA_SERVICE_H_
#define MPN_CUDA_SERVICE_H_

#include <cuda_runtime.h>
#include <stddef.h>

/** Makes device dev's service stream now, if it is not made yet (dev must be
 * the calling thread's current device).  A failure is logged; the stream is
 * then tried again at its first use. */
void mpn_cuda_service_make(int dev);

/**
 * The service stream of device dev (the calling thread's current device),
 * made now if it was not; NULL when it cannot be made (CUDA's last error is
 * cleared).  Jobs on it are short and wait for no other stream, so a
 * thread that synchronizes it waits at most for other threads' short jobs.
 */
cudaStream_t mpn_cuda_service_stream(int dev);

/** Forgets device dev's service stream without destroying it: the program
 * reset the device (core/renew.h), and the handle died with its context. */
void mpn_cuda_service_forget(int dev);

/**
 * cudaMalloc of bytes on the current device, whose first zero_bytes are
 * zeroed on the service stream before return; in relaxed capture mode, as
 * another thread may be capturing a graph.  On failure nothing is held.
 */
cudaError_t mpn_cuda_alloc_zeroed(size_t bytes, size_t zero_bytes, void** out);

#endif /* MPN_CUDA_SERVICE_H_ */
