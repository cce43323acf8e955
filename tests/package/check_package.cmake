# Installs the build tree into a scratch prefix, checks the installed headers, then configures,
# builds and runs tests/package as a separate project against it.
# Run with: cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P check_package.cmake
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
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
