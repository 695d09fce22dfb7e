# cuda.mk - compile CUDA sources with nvcc: .cu -> .lo (libtool objects, for
# libraries) and .cu -> .o (for test and example programs).  Included by
# Makefile.am; list a .cu file in any *_SOURCES and one of these rules builds
# it, PIC (and non-PIC with --enable-static) alike.
#
# libtool is told the compiler is the C compiler (--tag=CC): it then runs
# build-aux/nvcc-libtool, which turns the gcc flags libtool adds (-fPIC) into
# nvcc's -Xcompiler form.  Library host code gets -fvisibility=hidden like
# the C objects, so kernel launch wrappers are never exported.  Header
# dependencies come from nvcc -MD into $(DEPDIR)/*.Pcu beside the object and
# are read back with GNU make's -include (automake only tracks C sources).
SUFFIXES = .cu

NVCC_COMPILE = $(SHELL) $(top_srcdir)/build-aux/nvcc-libtool $(NVCC) \
	$(NVCC_GENCODE) $(DEFS) $(DEFAULT_INCLUDES) $(AM_CPPFLAGS) $(CPPFLAGS) \
	$(AM_NVCCFLAGS) $(NVCCFLAGS)
NVCC_LTCOMPILE = $(LIBTOOL) $(AM_V_lt) --tag=CC $(AM_LIBTOOLFLAGS) $(LIBTOOLFLAGS) \
	--mode=compile $(NVCC_COMPILE) --compiler-options=-fvisibility=hidden
NVCC_DEPFLAGS = -MD -MF $(@D)/$(DEPDIR)/$(*F).Pcu -MT $@ -MP

AM_V_NVCC = $(am__v_NVCC_@AM_V@)
am__v_NVCC_ = $(am__v_NVCC_@AM_DEFAULT_V@)
am__v_NVCC_0 = @echo "  NVCC    " $@;
am__v_NVCC_1 =

.cu.lo:
	$(AM_V_NVCC)$(NVCC_LTCOMPILE) $(NVCC_DEPFLAGS) -c -o $@ $<
.cu.o:
	$(AM_V_NVCC)$(NVCC_COMPILE) $(NVCC_DEPFLAGS) -c -o $@ $<

# Header dependencies of every .cu file automake knows about (all *_SOURCES).
MPN_CU_DEPFILES = $(foreach f,$(filter %.cu,$(SOURCES)),$(dir $(f))$(DEPDIR)/$(notdir $(f:.cu=.Pcu)))
-include $(MPN_CU_DEPFILES)

# Automake removes only the dependency files of C sources.
distclean-local: mpn-cu-distclean
mpn-cu-distclean:
	-rm -f $(MPN_CU_DEPFILES)
.PHONY: mpn-cu-distclean
