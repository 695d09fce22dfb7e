# mpn_mpi.m4 - find MPI through its compiler wrapper.  MPI is required.
#
# The library is compiled with the plain C compiler, not mpicc: mpicc would
# add its flags to every object, nvcc's included, and would hide what the
# library really depends on.  We ask the wrapper for its flags instead:
# Open MPI answers --showme:compile / --showme:link, MPICH and derivatives
# answer -show (the whole command line, split here).
#
# MPN_CHECK_MPI
#   --with-mpi[=MPICC|DIR]  the mpicc to ask, or an MPI root holding bin/mpicc
#   MPICC, MPIRUN (precious)
# Substitutes MPICC, MPI_CPPFLAGS, MPI_LDFLAGS, MPI_LIBS, MPIRUN, MPI_FLAVOR;
# AM_CONDITIONAL HAVE_MPI.
AC_DEFUN([MPN_CHECK_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=MPICC|DIR@:>@],
      [MPI compiler wrapper to take flags from, or MPI root holding bin/mpicc
       (default: mpicc in PATH); MPI is required])],
    [], [with_mpi=yes])
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper asked for MPI's flags])
  AC_ARG_VAR([MPIRUN], [MPI launcher used by make check (default: mpirun or mpiexec beside MPICC)])

  AS_CASE([$with_mpi],
    [no], [AC_MSG_ERROR([MPI is required: --without-mpi is not supported])],
    [yes|""], [],
    [AS_IF([test -d "$with_mpi"],
       [AS_IF([test -x "$with_mpi/bin/mpicc"], [MPICC="$with_mpi/bin/mpicc"],
              [test -x "$with_mpi/mpicc"], [MPICC="$with_mpi/mpicc"],
              [AC_MSG_ERROR([--with-mpi=$with_mpi: no bin/mpicc in that directory])])],
       [AS_IF([test -x "$with_mpi"], [MPICC=$with_mpi],
              [AC_MSG_ERROR([--with-mpi=$with_mpi: neither an executable nor a directory])])])])
  AC_PATH_PROGS([MPICC], [mpicc mpicc.openmpi mpicc.mpich], [no])
  AS_IF([test "x$MPICC" = xno],
    [AC_MSG_ERROR([mpicc not found: install an MPI (Debian: libopenmpi-dev openmpi-bin) or pass --with-mpi=MPICC|DIR])])

  AC_MSG_CHECKING([MPI flags from $MPICC])
  MPI_CPPFLAGS= MPI_LDFLAGS= MPI_LIBS=
  AS_IF([mpn_mpi_c=`"$MPICC" --showme:compile 2>/dev/null` &&
         mpn_mpi_l=`"$MPICC" --showme:link 2>/dev/null`],
    [MPI_FLAVOR="Open MPI"],
    [mpn_mpi_show=`"$MPICC" -show 2>/dev/null`],
    [MPI_FLAVOR="MPICH-like"
     # Drop the first word (the underlying compiler) and any -c.
     mpn_mpi_c=`echo "$mpn_mpi_show" | sed 's/^[[^ ]]* *//'`
     mpn_mpi_l=$mpn_mpi_c],
    [AC_MSG_RESULT([failed])
     AC_MSG_ERROR([$MPICC answers neither --showme:compile (Open MPI) nor -show (MPICH)])])
  for mpn_f in $mpn_mpi_c; do
    AS_CASE([$mpn_f],
      [-I*|-D*|-U*|-pthread], [MPI_CPPFLAGS="$MPI_CPPFLAGS $mpn_f"])
  done
  for mpn_f in $mpn_mpi_l; do
    AS_CASE([$mpn_f],
      [-L*|-Wl,*], [MPI_LDFLAGS="$MPI_LDFLAGS $mpn_f"],
      [-l*|-pthread|*.a|*.so|*.so.*], [MPI_LIBS="$MPI_LIBS $mpn_f"])
  done
  MPI_CPPFLAGS=`echo $MPI_CPPFLAGS` MPI_LDFLAGS=`echo $MPI_LDFLAGS` MPI_LIBS=`echo $MPI_LIBS`
  AC_MSG_RESULT([$MPI_FLAVOR])

  mpn_save_CPPFLAGS=$CPPFLAGS mpn_save_LDFLAGS=$LDFLAGS mpn_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $MPI_CPPFLAGS" LDFLAGS="$LDFLAGS $MPI_LDFLAGS" LIBS="$MPI_LIBS $LIBS"
  AC_CHECK_HEADER([mpi.h], [],
    [AC_MSG_ERROR([mpi.h not usable with MPI_CPPFLAGS='$MPI_CPPFLAGS' (from $MPICC)])])
  AC_MSG_CHECKING([whether MPI programs link with the plain compiler])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                   [[int t; return MPI_Init_thread(0, 0, MPI_THREAD_MULTIPLE, &t);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([cannot link MPI with '$MPI_LDFLAGS $MPI_LIBS' (from $MPICC): see config.log])])
  CPPFLAGS=$mpn_save_CPPFLAGS LDFLAGS=$mpn_save_LDFLAGS LIBS=$mpn_save_LIBS

  # The launcher that belongs to this MPI sits beside its mpicc.
  mpn_mpi_bindir=`dirname "$MPICC"`
  AC_PATH_PROGS([MPIRUN], [mpirun mpiexec], [no], [$mpn_mpi_bindir$PATH_SEPARATOR$PATH])
  AS_IF([test "x$MPIRUN" = xno],
    [AC_MSG_WARN([mpirun/mpiexec not found: the library builds, but make check cannot run MPI tests (Debian: openmpi-bin)])])

  AC_SUBST([MPI_CPPFLAGS])
  AC_SUBST([MPI_LDFLAGS])
  AC_SUBST([MPI_LIBS])
  AC_SUBST([MPI_FLAVOR])
  AM_CONDITIONAL([HAVE_MPI], [true])
])
