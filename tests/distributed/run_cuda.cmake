# Runs the distributed GPU tests (suites Cuda*) for CTest: cmake -P run_cuda.cmake with
#   MPIEXEC, NUMPROC_FLAG  the launcher and its process-count flag (FindMPI's MPIEXEC_*)
#   FLAGS         launcher flags, space-separated (e.g. --oversubscribe)
#   NP            number of ranks
#   EXE           strata_dist_tests
#   SKIP_MESSAGE  the tail of STRATA_REQUIRE_CUDA's message, which the test's SKIP_REGULAR_EXPRESSION matches
#   TIMEOUT       seconds before the job is killed (below the test's TIMEOUT, so its output is still shown)
# CTest marks a test skipped whenever its skip regex matches, whatever the exit code, and one job runs
# many tests: a failure beside skipped tests would pass for a skip. So the output is shown as it came
# only when the job exited 0; otherwise the skip message is defaced and the test fails.

foreach(var MPIEXEC NUMPROC_FLAG NP EXE SKIP_MESSAGE TIMEOUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_cuda.cmake: ${var} is not set")
  endif()
endforeach()

separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(
  COMMAND ${MPIEXEC} ${NUMPROC_FLAG} ${NP} ${flags} ${EXE} --gtest_filter=Cuda*
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT ${TIMEOUT})
if(rc STREQUAL "0")
  message("${output}")
else()
  string(REPLACE "${SKIP_MESSAGE}" "[skip message withheld: the job failed]" output "${output}")
  message("${output}")
  message(FATAL_ERROR "run_cuda.cmake: ${MPIEXEC} -np ${NP} ${EXE} --gtest_filter=Cuda* ended with: ${rc}")
endif()
