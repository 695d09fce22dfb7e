# mpn_cflags.m4 - compiler flags: C11, warnings, -Werror on request, and the
# hidden default visibility of the library's own objects.
#
# MPN_CHECK_CFLAGS
#   --enable-werror   add -Werror (default off: new compilers add warnings,
#                     and a release must still build with them)
# Substitutes MPN_WARN_CFLAGS (for everything we compile) and MPN_LIB_CFLAGS
# (library objects only: -fvisibility=hidden, so that only functions marked
# for export - nccl*, pnccl*, mpinccl* - leave libmpinccl.so).

# _MPN_ADD_CFLAG(VAR, FLAG): append FLAG to VAR if the C compiler accepts it.
AC_DEFUN([_MPN_ADD_CFLAG], [
  AC_MSG_CHECKING([whether $CC accepts $2])
  mpn_save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS -Werror $2"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
    [AC_MSG_RESULT([yes]); $1="$$1 $2"], [AC_MSG_RESULT([no])])
  CFLAGS=$mpn_save_CFLAGS
])

AC_DEFUN([MPN_CHECK_CFLAGS], [
  AC_REQUIRE([AC_PROG_CC])
  # Autoconf >= 2.70 already selects C11 when it can; older ones need a hand.
  AC_MSG_CHECKING([whether $CC compiles C11])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[
#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L
#error not C11
#endif
_Static_assert(sizeof(int) >= 2, "int");]], [])],
    [AC_MSG_RESULT([yes])],
    [CC="$CC -std=gnu11"
     AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[_Static_assert(1, "c11");]], [])],
       [AC_MSG_RESULT([with -std=gnu11])],
       [AC_MSG_RESULT([no]); AC_MSG_ERROR([a C11 compiler is required])])])

  AC_ARG_ENABLE([werror],
    [AS_HELP_STRING([--enable-werror], [treat compiler warnings as errors])],
    [], [enable_werror=no])
  MPN_WARN_CFLAGS=
  _MPN_ADD_CFLAG([MPN_WARN_CFLAGS], [-Wall])
  _MPN_ADD_CFLAG([MPN_WARN_CFLAGS], [-Wextra])
  dnl A local that hides another (a macro's temporary named like a loop
  dnl variable once sent every one-sided put of a benchmark to offset 0).
  _MPN_ADD_CFLAG([MPN_WARN_CFLAGS], [-Wshadow])
  AS_IF([test "x$enable_werror" = xyes], [MPN_WARN_CFLAGS="$MPN_WARN_CFLAGS -Werror"])
  MPN_LIB_CFLAGS=
  _MPN_ADD_CFLAG([MPN_LIB_CFLAGS], [-fvisibility=hidden])
  MPN_WARN_CFLAGS=`echo $MPN_WARN_CFLAGS` MPN_LIB_CFLAGS=`echo $MPN_LIB_CFLAGS`
  AC_SUBST([MPN_WARN_CFLAGS])
  AC_SUBST([MPN_LIB_CFLAGS])
])
