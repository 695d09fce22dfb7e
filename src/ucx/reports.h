/*
 * reports.h - the proxy thread's side of failures and size mismatches
 * (reports.c), for proxy.c: a failed command's error words, how the peer
 * is told (the per-peer reports whose hooks are notices.c's; a put's mark of
 * lost data).  Proxy thread only.
 */
#ifndef MPN_UCX_REPORTS_H_
#define MPN_UCX_REPORTS_H_

#include <stddef.h>

#include "ucx/proxy.h"

/** A failed command's error words, the owner's first failure told, and a
 *  warning; a send or receive that failed on this rank has its peer told. */
void mpn_ucx_report_failure(mpn_ucx_cmd_t* cmd, ucs_status_t status);

/** Whether a receive's completion shows a message of another size than the
 *  receive's, and what came.  A staged chunk (last_bit) also compares the
 *  sender's "last chunk" bit with its own: a sender whose message ended here
 *  sent fewer chunks, one whose message goes on sent more.  Bytes are told
 *  where the sender's message ended in this chunk, counting the chunks before
 *  as the receive's: both sides cut alike unless their chunk sizes differ
 *  (ucx/staged.c, chunk_of), and then their first chunks differ as well. */
int mpn_ucx_report_came(const mpn_ucx_cmd_t* cmd, ucs_status_t status, const ucp_tag_recv_info_t* info,
                        mpn_ucx_came_t* came, size_t* got);

/** A receive found a message of another size: the communicator's record
 *  is described by the first one (callbacks all run on this thread); a
 *  later sender is described in its peer's record, so that it is told too,
 *  once. */
void mpn_ucx_report_mismatch(const mpn_ucx_cmd_t* cmd, mpn_ucx_came_t came, size_t got);

/** An operation with a peer that an operation of its kind (a send, or a
 *  receive) failed on this rank with (reports.c, failed_here_note): not
 *  started. */
int mpn_ucx_report_refused(const mpn_ucx_cmd_t* cmd);

/** Runs the found hooks of the records claimed since the last turn. */
void mpn_ucx_report_run(void);

/** A closing owner's records go without their hook: it is freed next. */
void mpn_ucx_report_drop(const void* owner);

/** Whether a command of a message comes after a failure it must not hide:
 *  an earlier chunk of the message failed (its pipeline's *error) or, for
 *  one on the caller's buffer, the communicator failed (its stream may have
 *  been let go past released waits, and the buffer reused since). */
int mpn_ucx_report_failed_before(const mpn_ucx_cmd_t* cmd);

/** A put whose signal can tell its peer that the data did not all go. */
int mpn_ucx_report_signals_loss(const mpn_ucx_cmd_t* cmd);

/** The put's data is left out and its descriptor says so; the signal still
 *  goes, so that the peer's wait ends and its communicator reports the loss
 *  (cuda/apply.h) instead of landing stale bytes, or waiting for good for a
 *  signal that never comes.  status: the data's own failure (UCS_OK: an
 *  earlier one's, already noted).  Returns UCS_OK: the command goes on. */
ucs_status_t mpn_ucx_report_put_lost(mpn_ucx_cmd_t* cmd, ucs_status_t status);

#endif /* MPN_UCX_REPORTS_H_ */
