# Runs scripts/bench_ratios.py on bench_ratios.json, then on it and bench_ratios_pytorch.json (torch_cpu.py's
# report), and requires exactly bench_ratios.expected and bench_ratios_merged.expected: medians chosen over single
# runs and means, failed runs left out, the versions in the header, the PyTorch column only when a report has it,
# and block_step_sdpa set against strata's block_step.
#   cmake -DPYTHON=python3 -DSCRIPT=scripts/bench_ratios.py -DDIR=tests/tools -P bench_ratios.cmake
foreach(run "bench_ratios.json|bench_ratios.expected" "bench_ratios.json bench_ratios_pytorch.json|bench_ratios_merged.expected")
  string(REPLACE "|" ";" run "${run}")
  list(GET run 0 reports)
  list(GET run 1 expected_file)
  separate_arguments(reports)
  list(TRANSFORM reports PREPEND ${DIR}/)
  execute_process(COMMAND ${PYTHON} ${SCRIPT} ${reports} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  file(READ ${DIR}/${expected_file} expected)
  if(NOT rc EQUAL 0 OR NOT out STREQUAL expected)
    message(FATAL_ERROR "bench_ratios.py ${reports} printed (exit ${rc}):\n${out}${err}\nexpected:\n${expected}")
  endif()
endforeach()
