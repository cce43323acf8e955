# Proves that clang's thread-safety analysis bites on this project's locks (src/util/mutex.h,
# src/util/thread_annotations.h), as the preset clang-thread-safety relies on: right.cc, which
# uses every part of the wrapper the way src/ does, compiles without a finding; wrong.cc, once per
# WRONG_* case it holds, fails with the diagnostic written beside the case and with no other
# error. So annotations made empty under clang by mistake, or a wrapper that stops telling the
# analysis what it does, fail here instead of silently passing the preset. Syntax only: the
# analysis runs in the front end, so nothing is generated or linked (about a second per file).
#
# Run by CTest (tests/CMakeLists.txt) with:
#   -DCLANGXX=<clang++> -DSOURCE_DIR=<repo>
cmake_minimum_required(VERSION 3.25)
foreach(var CLANGXX SOURCE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

set(here ${SOURCE_DIR}/tests/thread_safety)
set(flags -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I${SOURCE_DIR}/src)

execute_process(COMMAND ${CLANGXX} ${flags} ${here}/right.cc RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "right.cc must compile with the analysis as errors, and did not:\n${out}")
endif()

file(STRINGS ${here}/wrong.cc case_lines REGEX "^#(el)?if defined\\(WRONG_[A-Z_]+\\) +// expect: ")
set(checked 0)
set(failures "")
foreach(line IN LISTS case_lines)
  string(REGEX MATCH "WRONG_[A-Z_]+" case "${line}")
  string(REGEX REPLACE "^.*// expect: " "" expected "${line}")
  execute_process(COMMAND ${CLANGXX} ${flags} -D${case} ${here}/wrong.cc RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE out)
  # Every error must be the analysis's own: a case that fails for another reason (a typo, a
  # header that no longer compiles) proves nothing.
  string(REGEX MATCHALL "error: [^\n]*" errors "${out}")
  string(REGEX MATCHALL "error: [^\n]*\\[-Werror,-Wthread-safety[^\n]*" analysis_errors "${out}")
  list(LENGTH errors error_count)
  list(LENGTH analysis_errors analysis_count)
  string(FIND "${out}" "error: ${expected}" at)
  if(rc EQUAL 0)
    string(APPEND failures "${case}: compiled, but the analysis must refuse it (${expected})\n")
  elseif(at EQUAL -1 OR NOT error_count EQUAL analysis_count)
    string(APPEND failures "${case}: expected only \"${expected}\", got:\n${out}\n")
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
if(checked LESS 5)
  message(FATAL_ERROR "only ${checked} WRONG_* cases found in wrong.cc: the parse is broken")
endif()
if(failures)
  message(FATAL_ERROR "the thread-safety analysis did not refuse what it must:\n${failures}")
endif()
message("right.cc compiles; all ${checked} wrong cases refused with their diagnostic")
