# The public headers: those `cmake --install` puts under include/strata/ and the API reference documents
# (scripts/docs). Internal headers stay behind: the op helpers (autograd/ops/common.h), the backend kernels
# (tensor/iteration.h, tensor/random_stream.h, tensor/cpu/, tensor/cuda/) and the distributed layer's glue and
# backends (distributed/detail/, distributed/mpi/), and the pipeline engine's stage
# (pipe/stage.h). The generated strata/version.h is public too.
#
#   strata_public_headers(<out-var> <source-dir>)   paths relative to <source-dir>, strata.h first
function(strata_public_headers out source_dir)
  set(reglob CONFIGURE_DEPENDS)   # a build re-globs when headers come or go; cmake -P (cmake/docs.cmake) cannot
  if(CMAKE_SCRIPT_MODE_FILE)
    set(reglob "")
  endif()
  file(GLOB_RECURSE headers ${reglob} RELATIVE ${source_dir}
    ${source_dir}/tensor/*.h ${source_dir}/autograd/*.h ${source_dir}/distributed/*.h ${source_dir}/c10d/*.hpp
    ${source_dir}/optim/*.h ${source_dir}/data/*.h ${source_dir}/nn/*.h ${source_dir}/pipe/*.h)
  list(FILTER headers EXCLUDE REGEX
    "^(autograd/ops/common\\.h|tensor/iteration\\.h|tensor/random_stream\\.h|tensor/cpu/|tensor/cuda/|distributed/detail/|distributed/mpi/|pipe/stage\\.h)")
  list(SORT headers)
  if(EXISTS ${source_dir}/strata.h)
    list(PREPEND headers strata.h)
  endif()
  set(${out} ${headers} PARENT_SCOPE)
endfunction()
