# libtorch calls whatever libblas.so.3 resolves to; the reference BLAS is ~35x slower than OpenBLAS.
find_file(INKSTONE_LIBBLAS libblas.so.3 PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} NO_DEFAULT_PATH)
if(INKSTONE_LIBBLAS)
  get_filename_component(_blas_real "${INKSTONE_LIBBLAS}" REALPATH)
  if(_blas_real MATCHES "/blas/libblas")
    message(WARNING "\n*** libblas.so.3 is the reference (unoptimised) BLAS: ${_blas_real}\n"
                    "*** Training will be ~35x slower. Fix: sudo apt-get install libopenblas0-openmp\n")
  else()
    message(STATUS "inkstone: BLAS ${_blas_real}")
  endif()
endif()
