# `cpack -G DEB` in a build directory makes libstrata-dev_<version>_<arch>.deb of what `cmake --install` puts:
# the library, the public headers, the CMake package, strata.pc and the tools (strata-pipe, strata-flight).
# Its Depends are the Debian packages a program built against strata needs: the headers and libraries of the
# dependencies (libstrata.a is static, so a program links them itself) and the tools' runtime libraries, which
# those packages bring (tests/consumer/deb.cmake checks that strata.pc uses nothing else from dpkg's packages).
# A build with the CUDA backend also needs the CUDA runtime, cuBLAS and NCCL, which come from NVIDIA (Debian has
# no NCCL) under names that vary by installer and version: name them in STRATA_DEB_CUDA_DEPENDS (from NVIDIA's
# apt repository, e.g. "cuda-cudart-dev-13-0, libcublas-dev-13-0, libnccl-dev").

set(CPACK_PACKAGE_NAME libstrata-dev)
set(CPACK_PACKAGE_VENDOR strata)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "C++20 tensors with reverse-mode autograd, data and pipeline parallelism over MPI")
set(CPACK_PACKAGE_CONTACT "strata maintainers")

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# The extended description, after the summary line (CPack wraps it).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "strata is a tensor library with reverse-mode automatic differentiation \
and libtorch's names: nn modules, optimizers, data loaders, safetensors checkpoints, torch.distributed's \
collectives over MPI, data parallel and pipeline parallel training. This package holds the static library, its \
headers, its CMake package (find_package(strata)), its pkg-config file (strata.pc) and the strata-pipe and \
strata-flight commands.")
# OpenMP comes with the compiler (libgomp1 is the tools' runtime); -dev packages bring their runtime libraries.
set(STRATA_DEB_DEPENDS "libeigen3-dev (>= 3.4), libopenmpi-dev, libdnnl-dev, zlib1g-dev, libgomp1")
set(STRATA_DEB_CUDA_DEPENDS "" CACHE STRING "Depends of the .deb for the CUDA runtime, cuBLAS and NCCL (CUDA builds)")
if(STRATA_CUDA_FOUND)
  if(STRATA_DEB_CUDA_DEPENDS)
    string(APPEND STRATA_DEB_DEPENDS ", ${STRATA_DEB_CUDA_DEPENDS}")
  else()
    message(STATUS "strata: the .deb of this CUDA build does not depend on the CUDA runtime, cuBLAS and NCCL "
                   "(set STRATA_DEB_CUDA_DEPENDS to the packages that provide them)")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${STRATA_DEB_DEPENDS}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "openmpi-bin")   # mpirun
set(CPACK_GENERATOR DEB)

include(CPack)
