# mpn_pkgconfig.m4 - pkg-config helpers shared by the dependency macros.
#
# Written here rather than taken from pkg.m4 so that autoreconf works even
# where pkg-config's m4 file is not installed, and so that pkg-config's
# answer can be split into the *_CPPFLAGS / *_LDFLAGS / *_LIBS triple every
# dependency macro sets.

# MPN_PROG_PKG_CONFIG: find pkg-config (optional; PKG_CONFIG empty if none).
AC_DEFUN([MPN_PROG_PKG_CONFIG], [
  AC_ARG_VAR([PKG_CONFIG], [path to pkg-config])
  AC_ARG_VAR([PKG_CONFIG_PATH], [directories added to pkg-config's search path])
  AC_PATH_TOOL([PKG_CONFIG], [pkg-config])
])

# MPN_PKG_FLAGS(PREFIX, MODULE, [IF-FOUND], [IF-NOT-FOUND])
# When pkg-config knows MODULE, set PREFIX_CPPFLAGS, PREFIX_LDFLAGS,
# PREFIX_LIBS and PREFIX_VERSION from it and run IF-FOUND.
AC_DEFUN([MPN_PKG_FLAGS], [
  AC_REQUIRE([MPN_PROG_PKG_CONFIG])
  AC_MSG_CHECKING([for $2 with pkg-config])
  AS_IF([test -n "$PKG_CONFIG" && $PKG_CONFIG --exists "$2" 2>/dev/null],
    [$1_CPPFLAGS=`$PKG_CONFIG --cflags "$2"`
     $1_LDFLAGS=`$PKG_CONFIG --libs-only-L "$2"`
     $1_LIBS=`$PKG_CONFIG --libs-only-l --libs-only-other "$2"`
     $1_VERSION=`$PKG_CONFIG --modversion "$2"`
     AC_MSG_RESULT([yes ($$1_VERSION)])
     $3],
    [AC_MSG_RESULT([no])
     $4])
])

# MPN_DIR_FLAGS(PREFIX, DIR, HEADER, LIBS)
# Flags for a package installed under DIR (DIR/include, DIR/lib64 or DIR/lib);
# stops configure if DIR/include/HEADER is missing (else the compiler could
# silently take the system's copy instead).  An rpath is added: a library
# from a private prefix must still be found at run time by programs that
# link libmpinccl.
AC_DEFUN([MPN_DIR_FLAGS], [
  AS_IF([test -f "$2/include/$3"], [],
    [AC_MSG_ERROR([$2/include/$3 not found: is $2 the install root?])])
  $1_CPPFLAGS="-I$2/include"
  AS_IF([test -d "$2/lib64"], [mpn_libdir="$2/lib64"], [mpn_libdir="$2/lib"])
  $1_LDFLAGS="-L$mpn_libdir -Wl,-rpath,$mpn_libdir"
  $1_LIBS="$4"
])

# MPN_TRY_LIB(PREFIX, HEADER, PROLOGUE, BODY, [IF-OK], [IF-FAILED])
# Compile and link BODY with PREFIX_CPPFLAGS/LDFLAGS/LIBS added.
AC_DEFUN([MPN_TRY_LIB], [
  mpn_save_CPPFLAGS=$CPPFLAGS mpn_save_LDFLAGS=$LDFLAGS mpn_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $$1_CPPFLAGS" LDFLAGS="$LDFLAGS $$1_LDFLAGS" LIBS="$$1_LIBS $LIBS"
  AC_MSG_CHECKING([whether $2 and its library are usable])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <$2>
$3]], [[$4]])],
    [AC_MSG_RESULT([yes]); mpn_try_ok=yes],
    [AC_MSG_RESULT([no]); mpn_try_ok=no])
  CPPFLAGS=$mpn_save_CPPFLAGS LDFLAGS=$mpn_save_LDFLAGS LIBS=$mpn_save_LIBS
  AS_IF([test "$mpn_try_ok" = yes], [$5], [$6])
])
