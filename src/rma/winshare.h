/*
 * winshare.h - the peers' allocations this process's live windows name.
 * Windows at offsets of one allocation share this process's import of it
 * (cuda/ipc.h caches imports by allocation), so the import is let go of
 * only when the last window naming it is.
 */
#ifndef MPN_RMA_WINSHARE_H_
#define MPN_RMA_WINSHARE_H_

#include <stdint.h>

/** A live window names owner's allocation buffer_id, mapped on device dev
 *  (one count per window, taken at its registration).  0: out of memory,
 *  no count taken. */
int mpn_win_share_take(uint64_t owner, uint64_t buffer_id, int dev);

/**
 * A window naming owner's allocation buffer_id on dev goes, with its count
 * if taken: the import is forgotten (mpn_ipc_forget: closed once idle)
 * when no live window of the process names the allocation any more, nor
 * another allocation the driver mapped in the same mapping; kept for the
 * others otherwise.
 */
void mpn_win_share_drop(uint64_t owner, uint64_t buffer_id, int dev, int taken);

/** How many live windows of this process name the allocation (for tests). */
int mpn_win_share_count(uint64_t owner, uint64_t buffer_id, int dev);

#endif /* MPN_RMA_WINSHARE_H_ */
