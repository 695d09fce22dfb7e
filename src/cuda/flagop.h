/*
 * flagop.h - the kinds of flag operation, shared by stream memory
 * operations (memop.h) and the flag-and-copy kernel (sync.h).
 */
#ifndef MPN_CUDA_FLAGOP_H_
#define MPN_CUDA_FLAGOP_H_

/* MPN_MEMOP_WAIT_GEQ_CLEAR: wait until the flag is at least the value, then
 * set it to 0 (a captured message's flag, which every replay finds at 0
 * again); in a batch of memory operations, a wait and a write.
 * MPN_MEMOP_WAIT_NOR: wait until ~(flag | value) != 0, that is until a bit
 * that is 0 in the value is 0 in the flag too (value ~1: bit 0 clear). */
enum {
  MPN_MEMOP_WRITE = 0,
  MPN_MEMOP_WAIT_GEQ = 1,
  MPN_MEMOP_WAIT_EQ = 2,
  MPN_MEMOP_WAIT_GEQ_CLEAR = 3,
  MPN_MEMOP_WAIT_NOR = 4
};

#endif /* MPN_CUDA_FLAGOP_H_ */
