/*
 * refusal.h - what the unit tests of refused calls share: a call's result
 * and the ncclGetLastError text it left, checked together (README, Errors:
 * the text names the call, the argument and the value).
 */
#ifndef MPN_TESTS_UNIT_REFUSAL_H_
#define MPN_TESTS_UNIT_REFUSAL_H_

#include <check.h>
#include <string.h>

#include "nccl.h"

/* Checks that call returned code and that the text ncclGetLastError(comm)
 * gives now begins with the called function's name and holds text. */
static inline void refusal_check(const char* call, ncclResult_t got, ncclComm_t comm, ncclResult_t code,
                                 const char* text) {
  const char* last = ncclGetLastError(comm);
  size_t name = strcspn(call, "(");
  ck_assert_msg(got == code && strncmp(last, call, name) == 0 && last[name] == ':' && strstr(last, text) != NULL,
                "%s returned %d, text \"%s\"; expected %d and a text naming the call, with \"%s\"", call, (int)got,
                last, (int)code, text);
}

/** Calls call (a public function's call, written out) and checks what it returned and said. */
#define REFUSED(comm, call, code, text) refusal_check(#call, (call), (comm), (code), (text))

#endif /* MPN_TESTS_UNIT_REFUSAL_H_ */
