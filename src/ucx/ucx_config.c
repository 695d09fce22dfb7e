/*
 * ucx_config.c - the configuration of the process's UCX context
 * (ucx_config.h).
 */
#include "ucx/ucx_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/debug.h"
#include "core/param.h"

/* Whether UCX's configuration has a setting (name as UCX prints it, "UCX_X="). */
static int config_has(const ucp_config_t* config, const char* name) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f == NULL) return 0;
  ucp_config_print(config, f, NULL, UCS_CONFIG_PRINT_CONFIG);
  fclose(f);
  int has = text && strstr(text, name) != NULL;
  free(text);
  return has;
}

ucs_status_t mpn_ucx_config_read(ucp_config_t** config, int* flush_fence) {
  *config = NULL;
  *flush_fence = 0;
  ucs_status_t st = ucp_config_read(NULL, NULL, config);
  if (st != UCS_OK) return st;
  if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL) {
    /* Dead peers are found by keepalive: three misses make the timeout. */
    char interval[32];
    snprintf(interval, sizeof(interval), "%llds", (long long)(mpn_param_int(MPN_PARAM_NET_TIMEOUT) + 2) / 3);
    if (ucp_config_modify(*config, "KEEPALIVE_INTERVAL", interval) != UCS_OK)
      MPN_INFO(MPN_SUBSYS_NET, "UCX does not take KEEPALIVE_INTERVAL; peers fail at its own pace");
  }
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (getenv("UCX_PROTO_ENABLE") == NULL) {
    /* The newer protocol selection (the default from UCX 1.15) found no
     * atomic operation between processes of one host on the GPU machine
     * ("cannot find remote protocol ... amo_post"): signals never arrived.
     * The older one has them; UCX_PROTO_ENABLE chooses otherwise. */
    if (ucp_config_modify(*config, "PROTO_ENABLE", "n") != UCS_OK)
      MPN_INFO(MPN_SUBSYS_NET, "UCX %u.%u.%u does not take PROTO_ENABLE", major, minor, release);
  }
  /* A weak fence may not order a put before an atomic that travels another
   * way; signals over UCX rely on that order (winstage.c).  Older UCX has no
   * such setting (and takes an unknown one silently, to warn at init). */
  *flush_fence = !config_has(*config, "UCX_FENCE_MODE=");
  if (*flush_fence)
    MPN_INFO(MPN_SUBSYS_NET,
             "UCX %u.%u.%u has no FENCE_MODE (its fence orders each lane only): a signal waits for the "
             "flush of its put",
             major, minor, release);
  if (*flush_fence) return UCS_OK;
  /* A mode the program set other than strong (weak, auto) may not order
   * them either: the flush then too. */
  const char* mode = getenv("UCX_FENCE_MODE");
  if (mode != NULL && strcasecmp(mode, "strong") != 0) {
    MPN_INFO(MPN_SUBSYS_NET,
             "UCX_FENCE_MODE=%s may not order a put before its signal: a signal waits for the flush "
             "of its put",
             mode);
    *flush_fence = 1;
  } else if (mode == NULL && ucp_config_modify(*config, "FENCE_MODE", "strong") != UCS_OK) {
    MPN_INFO(MPN_SUBSYS_NET, "UCX did not take FENCE_MODE=strong: a signal waits for the flush of its put");
    *flush_fence = 1;
  }
  return UCS_OK;
}
