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
set(flags -std=c++20 -fsyntax-only -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
          -Werror=thread-safety-beta -I${SOURCE_DIR}/src)

execute_process(COMMAND ${CLANGXX} ${flags} ${here}/right.cc RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "right.cc must compile with the analysis as errors, and did not:\n${out}")
endif()

# A case is `#if defined(WRONG_X)` or `#elif defined(WRONG_X)`, its next line
# `// expect: <the diagnostic>`.
file(READ ${here}/wrong.cc source)
string(REGEX MATCHALL "defined\\(WRONG_[A-Z_]+\\)\n *// expect: [^\n]+" cases "${source}")
set(checked 0)
set(failures "")
foreach(found IN LISTS cases)
  string(REGEX MATCH "WRONG_[A-Z_]+" case "${found}")
  string(REGEX REPLACE "^.*// expect: " "" expected "${found}")
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
string(REGEX MATCHALL "defined\\(WRONG_[A-Z_]+\\)" all_cases "${source}")
list(LENGTH all_cases case_count)
if(checked EQUAL 0 OR NOT checked EQUAL case_count)
  message(FATAL_ERROR "${case_count} WRONG_* cases in wrong.cc, ${checked} with an expect line")
endif()
if(failures)
  message(FATAL_ERROR "the thread-safety analysis did not refuse what it must:\n${failures}")
endif()
message("right.cc compiles; all ${checked} wrong cases refused with their diagnostic")
