# Extracts the example of docs/c_api.md (the first ```c block after the heading "## Execute: the
# usual way") into OUT and, when C_COMPILER is set, compiles it as strict C11 (-std=c11
# -pedantic-errors, warnings as errors) against INCLUDE_DIR: the page's example must build as a
# user copies it. tests/package/check_package.cmake also links it against the installed library.
#   cmake -DMARKDOWN=docs/c_api.md -DOUT=example.c [-DC_COMPILER=cc -DINCLUDE_DIR=include]
#         -P c_api_example.cmake

foreach(var MARKDOWN OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

set(heading "## Execute: the usual way")
file(READ ${MARKDOWN} page)
string(FIND "${page}" "${heading}" at)
if(at LESS 0)
  message(FATAL_ERROR "${MARKDOWN} has no heading '${heading}'")
endif()
string(SUBSTRING "${page}" ${at} -1 page)
string(FIND "${page}" "\n```c\n" start)
if(start LESS 0)
  message(FATAL_ERROR "${MARKDOWN}: no ```c block after '${heading}'")
endif()
math(EXPR start "${start} + 6")
string(SUBSTRING "${page}" ${start} -1 page)
string(FIND "${page}" "\n```" end)
if(end LESS 0)
  message(FATAL_ERROR "${MARKDOWN}: the ```c block after '${heading}' does not end")
endif()
math(EXPR end "${end} + 1")
string(SUBSTRING "${page}" 0 ${end} example_text)
file(WRITE ${OUT} "${example_text}")

if(C_COMPILER)
  get_filename_component(object_dir ${OUT} DIRECTORY)
  execute_process(
    COMMAND ${C_COMPILER} -std=c11 -pedantic-errors -Wall -Wextra -Werror -I${INCLUDE_DIR} -c
            ${OUT} -o ${object_dir}/c_api_example.o
    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "the example of ${MARKDOWN} (${OUT}) does not compile as C11:\n${out}")
  endif()
  message(STATUS "the example of ${MARKDOWN} compiles with -std=c11 -pedantic-errors")
endif()
