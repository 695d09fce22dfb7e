/*
 * mpi_test.h - what the test programs of tests/mpi share: this rank's count
 * of failed expectations, the report of each on stderr, and how a program
 * ends (the count summed over the ranks, a summary line, the exit status).
 */
#ifndef MPN_TESTS_MPI_TEST_H_
#define MPN_TESTS_MPI_TEST_H_

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>

#include "nccl.h"

/* This rank's failed expectations; checks of a program's own may add to it. */
static int failures;

/**
 * Says on stderr which expectation failed, where, and on which rank, and
 * counts it.  label and rank name the process as the program's messages
 * always have ("world 2", "rank 2"); last: NULL, or the words put before
 * the library's last error text, which then ends the message in parentheses.
 */
static inline void mpi_test_failed(const char* label, int rank, const char* file, int line, const char* cond,
                                   const char* last) {
  if (last)
    fprintf(stderr, "[%s %d] %s:%d: expected %s (%s%s)\n", label, rank, file, line, cond, last, ncclGetLastError(NULL));
  else
    fprintf(stderr, "[%s %d] %s:%d: expected %s\n", label, rank, file, line, cond);
  failures++;
}

/*
 * A program defines its EXPECT(cond) with this, naming its rank variable.
 * EXPECT passes #cond as text: the message shows the condition as written
 * (cond turned into text here would show its macros, NULL and the like,
 * expanded).
 */
#define MPI_TEST_EXPECT(cond, text, label, rank, last)                         \
  do {                                                                         \
    if (!(cond)) mpi_test_failed(label, rank, __FILE__, __LINE__, text, last); \
  } while (0)

/**
 * The end of a program: sums failures over MPI_COMM_WORLD, has rank 0 print
 * the summary line (what fmt says, then "<total> failures"), finalizes MPI
 * and returns the exit status, 1 when any rank failed: main returns it.
 */
__attribute__((format(printf, 2, 3))) static inline int mpi_test_finish(int rank, const char* fmt, ...) {
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("%d failures\n", total);
  }
  MPI_Finalize();
  return total ? 1 : 0;
}

#endif /* MPN_TESTS_MPI_TEST_H_ */
