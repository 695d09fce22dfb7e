# mpn_check.m4 - the Check unit-test framework.
#
# Tests are mandatory: when Check is missing, configure still succeeds (the
# library can be built and installed without it) but `make check` fails with
# a message saying what to install.  Only --without-check makes `make check`
# run no tests, on purpose.  --with-check (explicit) fails at configure time.
#
# MPN_CHECK_CHECK
# Substitutes CHECK_CFLAGS, CHECK_LIBS, CHECK_VERSION, HAVE_CHECK (yes/no/disabled);
# AM_CONDITIONAL HAVE_CHECK (usable), CHECK_MISSING (wanted but not found).
AC_DEFUN([MPN_CHECK_CHECK], [
  AC_ARG_WITH([check],
    [AS_HELP_STRING([--without-check],
      [build and run no tests (default: tests need the Check framework, and
       make check fails if it is missing)])],
    [], [with_check=auto])

  HAVE_CHECK=no CHECK_CPPFLAGS= CHECK_LDFLAGS= CHECK_LIBS= CHECK_VERSION=
  AS_IF([test "x$with_check" = xno],
    [HAVE_CHECK=disabled],
    [MPN_PKG_FLAGS([CHECK], [check], [],
       [CHECK_LIBS="-lcheck -lsubunit -lm -lrt -pthread"])
     MPN_TRY_LIB([CHECK], [check.h], [],
       [Suite *s = suite_create("probe"); return s == 0;],
       [HAVE_CHECK=yes],
       [AS_IF([test "x$with_check" = xyes],
          [AC_MSG_ERROR([Check requested (--with-check) but not usable: see config.log (Debian: check libsubunit-dev)])])
        AC_MSG_WARN([Check not found: the library builds, but make check will fail until it is installed (Debian: check libsubunit-dev) or configure is run with --without-check])])])

  CHECK_CFLAGS=$CHECK_CPPFLAGS
  CHECK_LIBS=`echo $CHECK_LDFLAGS $CHECK_LIBS`
  AS_IF([test $HAVE_CHECK = yes], [], [CHECK_CFLAGS= CHECK_LIBS= CHECK_VERSION=])
  AC_SUBST([HAVE_CHECK])
  AC_SUBST([CHECK_CFLAGS])
  AC_SUBST([CHECK_LIBS])
  AC_SUBST([CHECK_VERSION])
  AM_CONDITIONAL([HAVE_CHECK], [test $HAVE_CHECK = yes])
  AM_CONDITIONAL([CHECK_MISSING], [test $HAVE_CHECK = no])
])
