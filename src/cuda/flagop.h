/*
 * flagop.h - the kinds of flag operation, shared by stream memory
 * operations (memop.h) and the flag-and-copy kernel (sync.h).
 */
#ifndef MPN_CUDA_FLAGOP_H_
#define MPN_CUDA_FLAGOP_H_

/* MPN_MEMOP_WAIT_EQ_CLEAR: wait until the flag equals the value, then set it
 * to 0 (a captured message's flag, which every replay finds at 0 again);
 * in a batch of memory operations, a wait and a write. */
enum { MPN_MEMOP_WRITE = 0, MPN_MEMOP_WAIT_GEQ = 1, MPN_MEMOP_WAIT_EQ = 2, MPN_MEMOP_WAIT_EQ_CLEAR = 3 };

#endif /* MPN_CUDA_FLAGOP_H_ */
