/*
 * renew.h - what the process keeps per device (the service stream, event
 * and counter pools, stages, IPC exports and imports, ncclMemAlloc
 * records) made anew after the program resets the device with
 * cudaDeviceReset, instead of used stale: its handles and memory went with
 * the old context, and a new stream, event or allocation may have an old
 * one's handle or address.
 */
#ifndef MPN_CORE_RENEW_H_
#define MPN_CORE_RENEW_H_

/**
 * Called where the library takes device dev (the calling thread's current
 * device) into use, at a communicator's creation before anything of the
 * device is touched: when dev's context is not the one the process's state
 * of dev was made in, that state is forgotten, nothing destroyed (the old
 * handles may name new objects now), and communicators that lived through
 * the reset are failed (ncclInvalidUsage; they can only be destroyed or
 * aborted).  Threads creating communicators on dev at once wait for one
 * another here.  Returns whether a reset was found.
 */
int mpn_device_renew(int dev);

#endif /* MPN_CORE_RENEW_H_ */
