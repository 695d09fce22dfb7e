/*
 * kernels.h - the library's kernels, loaded into a device's context when a
 * communicator is created on it, not at their first launch.
 */
#ifndef MPN_CUDA_KERNELS_H_
#define MPN_CUDA_KERNELS_H_

/**
 * Loads every kernel of the library into the context of dev, the calling
 * thread's current device (kernels already loaded cost nothing).  A
 * failure is logged at WARN (the launches that need the kernel fail later,
 * reported).
 */
void mpn_cuda_kernels_load(int dev);

#endif /* MPN_CUDA_KERNELS_H_ */
