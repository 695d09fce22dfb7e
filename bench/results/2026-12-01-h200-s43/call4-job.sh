#!/usr/bin/env bash
# session 43, call 4 (final source): build; make check; test_reset at 2 ranks 15 times; then with the
# window's memset unsynchronized again (s43-memset.patch reversed) 15 times.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
loop() { local tag=$1 fails=0; for i in $(seq 1 15); do MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=60 tests/run-test ./tests/gpu/test_reset > $out/reset-$tag-$i.log 2>&1 || { fails=$((fails+1)); grep -h "wrong\|expected" $out/reset-$tag-$i.log | head -3; }; done; echo "$tag: $fails of 15 runs failed"; }
start=$(date +%s); loop synced; echo "($(( $(date +%s) - start )) s)"
patch -s -p1 -R < .device/s43-memset.patch && make -j16 tests/gpu/test_reset > $out/build-unsynced.log 2>&1 || echo "unsynced build failed"
loop unsynced
patch -s -p1 < .device/s43-memset.patch
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
