/*
 * api.h - how public functions are defined: exported with default
 * visibility, and each NCCL function also under its profiling name pncclX,
 * so that a tool can interpose ncclX and call through to pncclX.
 */
#ifndef MPN_CORE_API_H_
#define MPN_CORE_API_H_

#include "mpinccl.h"

#define MPN_EXPORT __attribute__((visibility("default")))

/* Defines pncclX and makes ncclX a weak alias of it. */
#define MPN_API(ret, name, ...) \
  MPN_EXPORT ret p##name(__VA_ARGS__); \
  MPN_EXPORT __attribute__((weak, alias("p" #name))) ret name(__VA_ARGS__); \
  ret p##name(__VA_ARGS__)

#endif /* MPN_CORE_API_H_ */
