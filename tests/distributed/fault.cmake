# Runs a failing job and checks that it ends: cmake -P fault.cmake with
#   MPIEXEC, NUMPROC_FLAG  the launcher and its process-count flag (FindMPI's MPIEXEC_*)
#   FLAGS        launcher flags, space-separated (e.g. --oversubscribe)
#   NP           number of ranks
#   EXE, MODE    strata_dist_fault and its mode (kill, throw, timeout, p2p)
#   ENV          optional VAR=value settings for the job, space-separated
#   EXPECT       regexes the output must each match, separated by &&
#   MAX_SECONDS  the bound on the job's wall time
#   FLIGHT       optional: strata-flight; the job then runs with STRATA_FLIGHT_RECORDER_DIR=WORK_DIR and
#   FLIGHT_EXPECT  regexes (separated by &&) that strata-flight's analysis of WORK_DIR must each match; empty:
#                no analysis (a job that fails before the recorder starts)
# The job must exit non-zero within MAX_SECONDS and print every EXPECT.

foreach(var MPIEXEC NUMPROC_FLAG NP EXE MODE EXPECT MAX_SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "fault.cmake: ${var} is not set")
  endif()
endforeach()

separate_arguments(flags UNIX_COMMAND "${FLAGS}")
separate_arguments(env UNIX_COMMAND "${ENV}")
string(REPLACE "&&" ";" expect "${EXPECT}")

if(DEFINED FLIGHT AND NOT FLIGHT_EXPECT STREQUAL "")
  set(analyse ON)
endif()
if(analyse)
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR})
  list(APPEND env STRATA_FLIGHT_RECORDER_DIR=${WORK_DIR})
endif()

string(TIMESTAMP start "%s" UTC)
# Twice the bound: a job that hangs is killed here and reported below instead of hanging ctest.
math(EXPR hard_limit "${MAX_SECONDS} * 2")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${env} ${MPIEXEC} ${NUMPROC_FLAG} ${NP} ${flags} ${EXE} ${MODE}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT ${hard_limit})
string(TIMESTAMP end "%s" UTC)
math(EXPR seconds "${end} - ${start}")

set(failures "")
if(NOT rc MATCHES "^[0-9]+$")
  string(APPEND failures "the job did not end by itself (${rc})\n")
elseif(rc EQUAL 0)
  string(APPEND failures "the job exited with status 0\n")
endif()
if(seconds GREATER MAX_SECONDS)
  string(APPEND failures "the job took ${seconds} s, more than ${MAX_SECONDS} s\n")
endif()
foreach(regex IN LISTS expect)
  if(NOT output MATCHES "${regex}")
    string(APPEND failures "the output does not match '${regex}'\n")
  endif()
endforeach()

set(analysis "")
if(analyse)
  execute_process(COMMAND ${FLIGHT} ${WORK_DIR} RESULT_VARIABLE flight_rc OUTPUT_VARIABLE analysis
                  ERROR_VARIABLE analysis TIMEOUT 30)
  if(NOT flight_rc EQUAL 0)
    string(APPEND failures "strata-flight exited with ${flight_rc}\n")
  endif()
  string(REPLACE "&&" ";" flight_expect "${FLIGHT_EXPECT}")
  foreach(regex IN LISTS flight_expect)
    if(NOT analysis MATCHES "${regex}")
      string(APPEND failures "strata-flight's analysis does not match '${regex}'\n")
    endif()
  endforeach()
  set(analysis "--- strata-flight ---\n${analysis}")
endif()

if(failures)
  message(FATAL_ERROR "strata_dist_fault ${MODE} on ${NP} ranks:\n${failures}--- output ---\n${output}${analysis}")
endif()
message(STATUS "strata_dist_fault ${MODE}: exit status ${rc} after ${seconds} s\n${output}${analysis}")
