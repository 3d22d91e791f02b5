# Checks that every tracked C++ file is formatted as .clang-format says (the clang-format test):
# cmake -DCLANG_FORMAT=<clang-format-14> -DGIT=<git> -DSOURCE_DIR=<repo> -P format.cmake
execute_process(COMMAND ${GIT} ls-files -- "*.h" "*.cpp" "*.cu" "*.cuh" WORKING_DIRECTORY ${SOURCE_DIR}
  OUTPUT_VARIABLE files RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "git ls-files failed in ${SOURCE_DIR}")
endif()
string(REPLACE "\n" ";" files "${files}")
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${files} WORKING_DIRECTORY ${SOURCE_DIR}
  RESULT_VARIABLE rc ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "files not formatted as .clang-format says (run clang-format-14 -i on them):\n${out}")
endif()
list(LENGTH files n)
message(STATUS "${n} files follow .clang-format")
