/*
 * ucx_probe.c - UCX capabilities: version and whether device memory can be
 * handed to UCX directly (otherwise the transport stages through host memory).
 */
#include "ucx/ucx_probe.h"

#include <pthread.h>
#include <ucp/api/ucp.h>

#include "core/error.h"

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static mpn_ucx_caps_t probed;
static ncclResult_t probe_status;

static void probe_run(void) {
  ucp_get_version(&probed.major, &probed.minor, &probed.release);
  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                         .features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM};
  ucp_config_t* config = NULL;
  ucp_context_h ctx = NULL;
  ucs_status_t st = ucp_config_read(NULL, NULL, &config);
  if (st == UCS_OK) st = ucp_init(&params, config, &ctx);
  if (config) ucp_config_release(config);
  if (st != UCS_OK) {
    probe_status = mpn_error_set(NULL, ncclSystemError, "UCX could not start: %s",
                                 ucs_status_string(st));
    return;
  }
  ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
  if (ucp_context_query(ctx, &attr) == UCS_OK)
    probed.cuda_memory = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  ucp_cleanup(ctx);
  MPN_INFO(MPN_SUBSYS_NET, "UCX %u.%u.%u, CUDA memory %s", probed.major, probed.minor,
           probed.release, probed.cuda_memory ? "supported" : "not supported (host staging)");
}

ncclResult_t mpn_ucx_probe(mpn_ucx_caps_t* caps) {
  pthread_once(&probe_once, probe_run);
  if (probe_status != ncclSuccess) return probe_status;
  *caps = probed;
  return ncclSuccess;
}
