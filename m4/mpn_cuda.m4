# mpn_cuda.m4 - locate the CUDA toolkit: nvcc, the runtime headers and the
# STATIC runtime.  CUDA is required.
#
# The runtime is linked statically (libcudart_static.a) and the driver library
# (-lcuda) is never linked: libmpinccl.so must load, and its unit tests run, on
# machines without the NVIDIA driver; the runtime finds the driver at run time.
#
# MPN_CHECK_CUDA
#   --with-cuda=DIR            toolkit root (default /usr/local/cuda)
#   --with-nvcc-gencode=FLAGS  nvcc code generation (default: sm_90 SASS + PTX)
#   NVCCFLAGS (precious)       extra nvcc flags (default -O2)
# Substitutes CUDA_DIR, CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS, NVCC,
# NVCC_GENCODE, NVCC_VERSION; AM_CONDITIONAL HAVE_CUDA; AC_DEFINE HAVE_CUDA.
AC_DEFUN([MPN_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda=DIR],
      [CUDA toolkit root holding bin/nvcc, include/ and lib64/libcudart_static.a
       (default /usr/local/cuda); CUDA is required])],
    [], [with_cuda=/usr/local/cuda])
  AC_ARG_WITH([nvcc-gencode],
    [AS_HELP_STRING([--with-nvcc-gencode=FLAGS],
      [nvcc -gencode flags (default "-gencode arch=compute_90,code=sm_90
       -gencode arch=compute_90,code=compute_90": Hopper code plus PTX for
       later GPUs)])],
    [], [with_nvcc_gencode="-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"])
  AC_ARG_VAR([NVCC], [CUDA compiler (default: DIR/bin/nvcc of --with-cuda)])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc (default -O2)])

  AS_CASE([$with_cuda],
    [no], [AC_MSG_ERROR([CUDA is required: --without-cuda is not supported])],
    [yes|""], [with_cuda=/usr/local/cuda])
  AS_IF([test -d "$with_cuda"], [],
    [AC_MSG_ERROR([CUDA toolkit directory '$with_cuda' not found: install the CUDA toolkit or pass --with-cuda=DIR])])
  CUDA_DIR=`cd "$with_cuda" && pwd`

  AC_PATH_PROG([NVCC], [nvcc], [no], [$CUDA_DIR/bin])
  AS_IF([test "x$NVCC" = xno],
    [AC_MSG_ERROR([nvcc not found in $CUDA_DIR/bin: pass --with-cuda=DIR with the toolkit root])])
  AC_MSG_CHECKING([nvcc version])
  NVCC_VERSION=`"$NVCC" --version 2>/dev/null | sed -n 's/.*release \([[0-9.]]*\),.*/\1/p'`
  AS_IF([test -z "$NVCC_VERSION"], [NVCC_VERSION=unknown])
  AC_MSG_RESULT([$NVCC_VERSION])
  NVCC_GENCODE=$with_nvcc_gencode
  AS_IF([test "${NVCCFLAGS+set}" = set], [], [NVCCFLAGS=-O2])

  # lib64 is the toolkit's usual layout; targets/<arch>/lib is where lib64 points.
  CUDA_LIBDIR=
  for mpn_d in "$CUDA_DIR/lib64" "$CUDA_DIR/lib" "$CUDA_DIR/targets/`uname -m`-linux/lib"; do
    AS_IF([test -f "$mpn_d/libcudart_static.a"], [CUDA_LIBDIR=$mpn_d; break])
  done
  AS_IF([test -z "$CUDA_LIBDIR"],
    [AC_MSG_ERROR([libcudart_static.a not found under $CUDA_DIR/lib64: mpinccl links the CUDA runtime statically])])
  # -lcudart_static rather than the archive's path: the same static link, but
  # libtool then does not warn on every link of the shared library.  nvcc's
  # host code is C++ (guard variables, personality routine): -lstdc++.
  CUDA_CPPFLAGS="-I$CUDA_DIR/include"
  CUDA_LDFLAGS="-L$CUDA_LIBDIR"
  CUDA_LIBS="-lcudart_static -lstdc++ -ldl -lrt -lpthread"

  mpn_save_CPPFLAGS=$CPPFLAGS; mpn_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
  AC_CHECK_HEADER([cuda_runtime.h], [],
    [AC_MSG_ERROR([cuda_runtime.h not found in $CUDA_DIR/include])])
  # Linking needs no driver: the static runtime resolves libcuda.so at run time.
  mpn_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"; LIBS="$CUDA_LIBS $LIBS"
  AC_MSG_CHECKING([whether a program links with the static CUDA runtime])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime.h>]],
                                  [[int n; return cudaGetDeviceCount(&n) != cudaSuccess;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([cannot link with $CUDA_LDFLAGS $CUDA_LIBS: see config.log])])
  CPPFLAGS=$mpn_save_CPPFLAGS; LDFLAGS=$mpn_save_LDFLAGS; LIBS=$mpn_save_LIBS

  AC_DEFINE([HAVE_CUDA], [1], [Define to 1: the CUDA runtime is available.])
  AC_SUBST([CUDA_DIR])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC_GENCODE])
  AC_SUBST([NVCC_VERSION])
  AM_CONDITIONAL([HAVE_CUDA], [true])
])
