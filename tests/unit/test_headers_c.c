/*
 * test_headers_c.c - both public headers compile as C with -Wall -Wextra
 * -Werror, and the values programs depend on are compile-time constants.
 */
#include "mpinccl.h"
#include "nccl.h" /* twice: the include guards hold */

_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "unique id size");
_Static_assert(NCCL_VERSION_CODE == NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), "version");
_Static_assert(ncclNumTypes == 12 && ncclNumResults == 9, "enum counts");
_Static_assert(sizeof(ncclWaitSignalDesc_t) == 4 * sizeof(int), "descriptor layout");

int main(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  int peer = MPINCCL_PROC_NULL;
  return config.magic == NCCL_API_MAGIC && sim.size == sizeof(sim) && peer < 0 ? 0 : 1;
}
