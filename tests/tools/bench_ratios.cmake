# Runs scripts/bench_ratios.py on bench_ratios.json and requires exactly bench_ratios.expected: medians chosen over
# single runs and means, failed runs left out, the libtorch version in the header, and block_step_sdpa set
# against strata's block_step.
#   cmake -DPYTHON=python3 -DSCRIPT=scripts/bench_ratios.py -DDIR=tests/tools -P bench_ratios.cmake
execute_process(COMMAND ${PYTHON} ${SCRIPT} ${DIR}/bench_ratios.json OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
file(READ ${DIR}/bench_ratios.expected expected)
if(NOT rc EQUAL 0 OR NOT out STREQUAL expected)
  message(FATAL_ERROR "bench_ratios.py printed (exit ${rc}):\n${out}${err}\nexpected:\n${expected}")
endif()
