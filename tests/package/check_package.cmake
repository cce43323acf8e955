# Installs the build tree into a scratch prefix, checks the installed headers, then configures,
# builds and runs tests/package as a separate project against it.
# Run with: cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DVERSION=... -P check_package.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR VERSION)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)

file(GLOB_RECURSE headers ${WORK_DIR}/prefix/include/idem/*.h)
if(NOT headers)
  message(FATAL_ERROR "no headers installed under ${WORK_DIR}/prefix/include/idem")
endif()
foreach(header ${headers})
  file(STRINGS ${header} includes REGEX "^#include <(rocksdb|boost|fmt|openssl)/")
  if(includes)
    message(FATAL_ERROR "${header} includes a dependency's header: ${includes}")
  endif()
endforeach()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/package -B ${WORK_DIR}/consumer
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer -j2)
run(${WORK_DIR}/consumer/consumer ${WORK_DIR}/store)
message(STATUS "find_package(idem) consumer built and ran")

# The pkg-config file: installed, relocatable, and enough to build and run a C program against
# the static library (tests/c_api_test.c, compiled as C99 and linked by the C compiler driver).
file(GLOB_RECURSE pc_files ${WORK_DIR}/prefix/*/pkgconfig/idem.pc)
if(NOT pc_files)
  message(FATAL_ERROR "idem.pc is not installed under ${WORK_DIR}/prefix")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
find_program(C_COMPILER NAMES cc gcc clang)
if(NOT PKG_CONFIG OR NOT C_COMPILER)
  message(STATUS "no pkg-config or C compiler: skipping the pkg-config consumer")
  return()
endif()
set(ENV{PKG_CONFIG_PATH} "${pc_dir}")

function(pkg_config out)
  execute_process(COMMAND ${PKG_CONFIG} ${ARGN} idem RESULT_VARIABLE code
                  OUTPUT_VARIABLE flags ERROR_VARIABLE error OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} idem failed (${code}): ${error}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

pkg_config(cflags --cflags)
pkg_config(libs --libs)
pkg_config(static_libs --static --libs)
# The prefix is relative to the file's location: -I.../lib/pkgconfig/../../include must be ours.
set(include_found FALSE)
foreach(flag ${cflags})
  if(flag MATCHES "^-I(.*)$")
    file(REAL_PATH "${CMAKE_MATCH_1}" include_dir)
    file(REAL_PATH "${WORK_DIR}/prefix/include" expected_dir)
    if(include_dir STREQUAL expected_dir AND EXISTS "${include_dir}/idem/c.h")
      set(include_found TRUE)
    endif()
  endif()
endforeach()
if(NOT include_found)
  message(FATAL_ERROR "pkg-config --cflags idem gives '${cflags}', not ${WORK_DIR}/prefix/include")
endif()
string(REPLACE ";" " " libs_text "${libs}")
if(NOT libs_text MATCHES "(^| )-lidem( |$)")
  message(FATAL_ERROR "pkg-config --libs idem gives '${libs_text}', without -lidem")
endif()

# The C header alone is C89 (with <stdint.h>) and C++.
file(WRITE ${WORK_DIR}/c_header.c "#include <idem/c.h>\nint main(void) { return IDEM_OK; }\n")
run(${C_COMPILER} -std=c89 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only ${cflags}
    ${WORK_DIR}/c_header.c)
run(${C_COMPILER} -x c++ -std=c++11 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only
    ${cflags} ${WORK_DIR}/c_header.c)

run(${C_COMPILER} -std=c99 -Wall -Wextra -Werror ${cflags} "-DIDEM_EXPECTED_VERSION=\"${VERSION}\""
    ${SOURCE_DIR}/tests/c_api_test.c ${static_libs} -pthread -o ${WORK_DIR}/c_consumer)
run(${WORK_DIR}/c_consumer)
message(STATUS "pkg-config consumer (C) built and ran")
