# Checks which symbols of the static library are exported (default visibility): the public C++
# and C API, marked IDEM_EXPORT (include/idem/export.h), must be; the internals of every layer
# (compiled with hidden visibility) must not be, so that a shared library or program linking
# libidem.a exports none of them.
#   cmake -DLIBRARY=libidem.a -DREADELF=readelf -DCXXFILT=c++filt -DWORK_DIR=dir -P check_exports.cmake

cmake_minimum_required(VERSION 3.25)

execute_process(COMMAND ${READELF} -sW ${LIBRARY} OUTPUT_VARIABLE table RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${READELF} -sW ${LIBRARY} failed")
endif()
# Defined global or weak symbols with default visibility:
#   Num: Value Size Type Bind Vis Ndx Name
string(REGEX MATCHALL "[^\n]*(GLOBAL|WEAK) +DEFAULT +[0-9]+ [^\n]*" lines "${table}")
set(names "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE ".* [0-9]+ ([^ ]+)$" "\\1" name "${line}")
  string(APPEND names "${name}\n")
endforeach()
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/exported.txt "${names}")
execute_process(COMMAND ${CXXFILT} INPUT_FILE ${WORK_DIR}/exported.txt
                OUTPUT_VARIABLE demangled RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${CXXFILT} failed")
endif()
string(REPLACE "\n" ";" exported "${demangled}")

set(problems "")
foreach(required IN ITEMS "idem_open" "idem_record_retryable" "idem::Store::Open("
                          "idem::Status::ToString" "idem::NewRequestId" "idem::IsRetryable("
                          "typeinfo for idem::Store")
  set(found FALSE)
  foreach(symbol IN LISTS exported)
    string(FIND "${symbol}" "${required}" at)
    if(at EQUAL 0)
      set(found TRUE)
      break()
    endif()
  endforeach()
  if(NOT found)
    string(APPEND problems "  not exported: ${required}\n")
  endif()
endforeach()

set(internal_count 0)
foreach(symbol IN LISTS exported)
  if(symbol MATCHES "idem::(util|engine|storage|sharing)::|idem::(LocalBackend|StallWatch|LeaseKeeper|LeaseStatus)\\b")
    math(EXPR internal_count "${internal_count} + 1")
    if(internal_count LESS_EQUAL 20)
      string(APPEND problems "  exported but internal: ${symbol}\n")
    endif()
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "the exports of ${LIBRARY} are wrong (${internal_count} internal):\n${problems}")
endif()
list(LENGTH exported count)
message(STATUS "${LIBRARY}: ${count} exported symbols, the public API among them; no internals")
