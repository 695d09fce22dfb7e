// test_headers_cxx.cc - both public headers compile as C++ with -Wall -Wextra
// -Werror and declare C linkage (the calls below link against the C library).
#include "mpinccl.h"
#include "nccl.h"

static_assert(sizeof(ncclUniqueId) == 128, "unique id size");

// The CUDA half, bfloat16 and fp8 types come with nccl.h, as with NCCL's.
static __half half_value;
static __nv_bfloat16 bf16_value;
static __nv_fp8_e4m3 fp8_value;
static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 30, "NCCL API version");

int main() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  if (config.size != sizeof(ncclConfig_t)) return 1;
  if (sizeof(half_value) != 2 || sizeof(bf16_value) != 2 || sizeof(fp8_value) != 1) return 1;
  ncclResult_t (*fn)(const ncclComm_t, int*) = pncclCommCount;
  return fn == nullptr || ncclGetErrorString(ncclInvalidArgument) == nullptr;
}
