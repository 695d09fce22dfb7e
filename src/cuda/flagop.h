/*
 * flagop.h - the kinds of flag operation, shared by stream memory
 * operations (memop.h) and the flag-and-copy kernel (sync.h).
 */
#ifndef MPN_CUDA_FLAGOP_H_
#define MPN_CUDA_FLAGOP_H_

enum { MPN_MEMOP_WRITE = 0, MPN_MEMOP_WAIT_GEQ = 1, MPN_MEMOP_WAIT_EQ = 2 };

#endif /* MPN_CUDA_FLAGOP_H_ */
