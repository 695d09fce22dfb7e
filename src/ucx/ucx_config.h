/*
 * ucx_config.h - the configuration the process's UCX context is made with:
 * UCX's own (its UCX_* variables), with the settings mpinccl relies on
 * changed where the user set none.
 */
#ifndef MPN_UCX_CONFIG_H_
#define MPN_UCX_CONFIG_H_

#include <ucp/api/ucp.h>

/**
 * Reads UCX's configuration into *config (release it with
 * ucp_config_release) and changes, where the user did not set them:
 * keepalive, so that a dead peer fails within MPINCCL_NET_TIMEOUT; the
 * older protocol selection, which has atomics between processes of one
 * host; a strong fence.  *flush_fence is set to 1 when this UCX has no
 * fence mode (its fence orders each lane only: a signal must wait for the
 * flush of its put), else 0.
 */
ucs_status_t mpn_ucx_config_read(ucp_config_t** config, int* flush_fence);

#endif /* MPN_UCX_CONFIG_H_ */
