/*
 * The test step job3.sh ran (tests/gpu/test_p2p.c at cbc921d, STEP after
 * chain_three). Kept here as the reproducer of docs/P2P.md known problem
 * 8 (c): with the rule as landed (chains only for fronts of several steps)
 * it hangs at 3 processes, with and without MPS.
 */
/*
 * chain_three with one launch per process in rank 0's group: rank 1 sends
 * to rank 0, then to rank 2, in launches of their own; rank 2 receives
 * that, then sends to rank 0; rank 0 receives both in one group posted
 * last, so it moves both, in either order of its receives.  Rank 2's send
 * is ready only once rank 1's second send is done, which needs rank 0's
 * copy of rank 1's first: a rank 0 that waited for both before copying
 * would hang, though each process posted one launch of the group (found by
 * a desk review in the twenty-fourth session).
 */
static void chain_single(void) {
  enum { BYTES = 1 << 20, ROUNDS = 4 };
  char *a = dev_alloc(BYTES), *b = dev_alloc(BYTES), *c = dev_alloc(BYTES);
  for (int round = 0; round < ROUNDS && nranks >= 3; round++) {
    uint32_t k = 14000 + 10 * (uint32_t)round;
    EXPECT(cudaMemsetAsync(a, 0, BYTES, stream) == cudaSuccess);
    EXPECT(cudaMemsetAsync(b, 0, BYTES, stream) == cudaSuccess);
    if (rank == 1) {
      pattern_fill(a, BYTES, seed_of(1, 0, k), stream);
      pattern_fill(c, BYTES, seed_of(1, 2, k + 1), stream);
    }
    if (rank == 2) pattern_fill(b, BYTES, seed_of(2, 0, k + 2), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      EXPECT_OK(ncclSend(a, BYTES, ncclInt8, 0, comm, stream));
      EXPECT_OK(ncclSend(c, BYTES, ncclInt8, 2, comm, stream));
    }
    if (rank == 2) {
      EXPECT_OK(ncclRecv(a, BYTES, ncclInt8, 1, comm, stream));
      EXPECT_OK(ncclSend(b, BYTES, ncclInt8, 0, comm, stream));
    }
    MPI_Barrier(MPI_COMM_WORLD); /* ranks 1 and 2 posted first */
    if (rank == 0) {
      EXPECT_OK(ncclGroupStart());
      for (int i = 0; i < 2; i++) {
        int from = (i + round) % 2 == 0 ? 1 : 2; /* rank 1's first in even rounds */
        EXPECT_OK(ncclRecv(from == 1 ? a : b, BYTES, ncclInt8, from, comm, stream));
      }
      EXPECT_OK(ncclGroupEnd());
      expect_pattern(a, BYTES, seed_of(1, 0, k), "chain_single: rank 1's");
      expect_pattern(b, BYTES, seed_of(2, 0, k + 2), "chain_single: rank 2's");
    }
    if (rank == 2) expect_pattern(a, BYTES, seed_of(1, 2, k + 1), "chain_single: rank 1's to rank 2");
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  cudaFree(a), cudaFree(b), cudaFree(c);
}
