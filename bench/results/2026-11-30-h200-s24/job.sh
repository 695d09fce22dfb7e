# Twenty-fourth session, call 1, at c54bb55 (device tool, nvidia-h200):
source .device/setup.sh && (autoreconf -fi >/dev/null 2>&1 && ./configure -q >/dev/null 2>&1) && make -j16 >/dev/null 2>&1 && (time make -j4 check > $OUT/check.log 2>&1); echo rc=$?; grep -E "^(PASS|FAIL|SKIP|ERROR)|^# " $OUT/check.log; cat tests/unit/test_nccl_header.sh.log | tail -4; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Printed: make check 25 of 26 passed (test_hosts skipped), 67 s;
# test_nccl_header.sh against /usr/include/nccl.h (NCCL 2.28.3): 40 signatures
# agree in C and C++, all 76 common facts agree. NVIDIA H200, driver 580.159.04.
