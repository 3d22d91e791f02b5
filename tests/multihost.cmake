# Several machines on this one (scripts/multihost, issue 16): tests/multihost/run trains the DDP and pipeline
# examples on two hosts made of network namespaces, TCP only, and on one, and requires the same losses; then
# it cuts a host's cable mid-run and requires the watchdog to end the job naming the ranks behind the cut.
# About a minute here. It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and reports itself skipped, saying
# why, where namespaces cannot be made (most containers). The sanitizer build leaves it out: it tests the
# launch and the network, which the Release build covers, at four times the time.
if(STRATA_BUILD_EXAMPLES AND NOT STRATA_SANITIZE)
  add_test(NAME multihost
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/multihost/run $<TARGET_FILE:mnist_cnn_ddp> $<TARGET_FILE:pipeline>)
  set_tests_properties(multihost PROPERTIES LABELS "distributed;multihost" RUN_SERIAL ON TIMEOUT 300
    SKIP_RETURN_CODE 77 ENVIRONMENT "${STRATA_MPI_TEST_ENV}")
endif()
