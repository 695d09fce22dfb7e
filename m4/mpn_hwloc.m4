# mpn_hwloc.m4 - hwloc, used to place the UCX proxy thread near the GPU.
#
# Optional: without it the proxy thread is left where the OS puts it.  Asked
# for explicitly (--with-hwloc or --with-hwloc=DIR) it must be found.
#
# MPN_CHECK_HWLOC
#   --with-hwloc[=DIR]  default: use the system's hwloc (pkg-config hwloc,
#                       else hwloc.h with -lhwloc) if present
#   --without-hwloc     build without hwloc
# Substitutes HWLOC_CPPFLAGS, HWLOC_LDFLAGS, HWLOC_LIBS, HWLOC_VERSION,
# HAVE_HWLOC (yes/no); AM_CONDITIONAL HAVE_HWLOC; AC_DEFINE HAVE_HWLOC.
AC_DEFUN([MPN_CHECK_HWLOC], [
  AC_ARG_WITH([hwloc],
    [AS_HELP_STRING([--with-hwloc@<:@=DIR@:>@],
      [hwloc for thread placement (default: use the system's if found;
       DIR: hwloc install root)])],
    [], [with_hwloc=check])

  HAVE_HWLOC=no HWLOC_CPPFLAGS= HWLOC_LDFLAGS= HWLOC_LIBS= HWLOC_VERSION=
  AS_CASE([$with_hwloc],
    [no], [],
    [yes|check], [MPN_PKG_FLAGS([HWLOC], [hwloc], [], [HWLOC_LIBS=-lhwloc])],
    [AS_IF([test -d "$with_hwloc"], [],
       [AC_MSG_ERROR([--with-hwloc=$with_hwloc: no such directory])])
     MPN_DIR_FLAGS([HWLOC], [$with_hwloc], [hwloc.h], [-lhwloc])])

  AS_IF([test "x$with_hwloc" != xno],
    [MPN_TRY_LIB([HWLOC], [hwloc.h], [],
       [hwloc_topology_t t; if (hwloc_topology_init(&t)) return 1; hwloc_topology_destroy(t); return 0;],
       [HAVE_HWLOC=yes],
       [AS_IF([test "x$with_hwloc" != xcheck],
          [AC_MSG_ERROR([hwloc requested (--with-hwloc=$with_hwloc) but hwloc.h or -lhwloc not usable: see config.log (Debian: libhwloc-dev)])])
        HWLOC_CPPFLAGS= HWLOC_LDFLAGS= HWLOC_LIBS=])])
  AS_IF([test $HAVE_HWLOC = yes],
    [AC_DEFINE([HAVE_HWLOC], [1], [Define to 1 to place threads with hwloc.])])

  AC_SUBST([HAVE_HWLOC])
  AC_SUBST([HWLOC_CPPFLAGS])
  AC_SUBST([HWLOC_LDFLAGS])
  AC_SUBST([HWLOC_LIBS])
  AC_SUBST([HWLOC_VERSION])
  AM_CONDITIONAL([HAVE_HWLOC], [test $HAVE_HWLOC = yes])
])
