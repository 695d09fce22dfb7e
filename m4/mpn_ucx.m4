# mpn_ucx.m4 - UCX, the transport between processes that cannot use CUDA IPC.
#
# Optional: without UCX the library still works between ranks of one host
# (self, local and IPC transports).  Asked for explicitly (--with-ucx or
# --with-ucx=DIR) it must be found, or configure stops.
#
# MPN_CHECK_UCX
#   --with-ucx[=DIR]   default: use the system's UCX (pkg-config ucx, else
#                      ucp/api/ucp.h with -lucp -luct -lucs) if present
#   --without-ucx      build without UCX
# Substitutes UCX_CPPFLAGS, UCX_LDFLAGS, UCX_LIBS, UCX_VERSION, HAVE_UCX (yes/no);
# AM_CONDITIONAL HAVE_UCX; AC_DEFINE HAVE_UCX.
AC_DEFUN([MPN_CHECK_UCX], [
  AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx@<:@=DIR@:>@],
      [UCX for transfers between hosts (default: use the system's if found;
       DIR: UCX install root)])],
    [], [with_ucx=check])

  HAVE_UCX=no UCX_CPPFLAGS= UCX_LDFLAGS= UCX_LIBS= UCX_VERSION=
  AS_CASE([$with_ucx],
    [no], [],
    [yes|check], [MPN_PKG_FLAGS([UCX], [ucx], [],
                    [UCX_LIBS="-lucp -luct -lucs"])],
    [AS_IF([test -d "$with_ucx"], [],
       [AC_MSG_ERROR([--with-ucx=$with_ucx: no such directory])])
     MPN_DIR_FLAGS([UCX], [$with_ucx], [ucp/api/ucp.h], [-lucp -luct -lucs])])

  AS_IF([test "x$with_ucx" != xno],
    [MPN_TRY_LIB([UCX], [ucp/api/ucp.h], [],
       [unsigned a, b, c; ucp_get_version(&a, &b, &c); return 0;],
       [HAVE_UCX=yes],
       [AS_IF([test "x$with_ucx" != xcheck],
          [AC_MSG_ERROR([UCX requested (--with-ucx=$with_ucx) but ucp/api/ucp.h or -lucp not usable: see config.log (Debian: libucx-dev)])])
        UCX_CPPFLAGS= UCX_LDFLAGS= UCX_LIBS=])])

  AS_IF([test $HAVE_UCX = yes && test -z "$UCX_VERSION"],
    [# Not from pkg-config: the header's API version is what we know.
     mpn_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $UCX_CPPFLAGS"
     AC_COMPUTE_INT([mpn_ucx_major], [UCP_API_MAJOR], [#include <ucp/api/ucp_version.h>], [mpn_ucx_major=])
     AC_COMPUTE_INT([mpn_ucx_minor], [UCP_API_MINOR], [#include <ucp/api/ucp_version.h>], [mpn_ucx_minor=])
     CPPFLAGS=$mpn_save_CPPFLAGS
     AS_IF([test -n "$mpn_ucx_major"], [UCX_VERSION="$mpn_ucx_major.$mpn_ucx_minor"])])
  AS_IF([test $HAVE_UCX = yes],
    [AC_DEFINE([HAVE_UCX], [1], [Define to 1 to build the UCX transport.])])

  AC_SUBST([HAVE_UCX])
  AC_SUBST([UCX_CPPFLAGS])
  AC_SUBST([UCX_LDFLAGS])
  AC_SUBST([UCX_LIBS])
  AC_SUBST([UCX_VERSION])
  AM_CONDITIONAL([HAVE_UCX], [test $HAVE_UCX = yes])
])
