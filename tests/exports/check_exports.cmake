# Checks which symbols the library exports.
#
# A static libidem.a: its symbols of default visibility, read with readelf. The public C++ and C
# API, marked IDEM_EXPORT (include/idem/export.h), must be among them; the internals of every
# layer (compiled with hidden visibility) must not, so that a shared library or program linking
# libidem.a exports none of them.
#
# A shared libidem.so: its dynamic symbols, read with `nm -D --defined-only`. Every one must be
# on the allow-list, the public API: a C function idem_*, or a name in namespace idem (with the
# type information and virtual table of its classes) outside the internal ones. So no RocksDB,
# fmt or standard library symbol, nor any internal of idem. The list is in WORK_DIR/exported.txt.
# And every one has the version IDEM_<SOVERSION> (src/idem.map.in), its default.
#
#   cmake -DLIBRARY=libidem.a|libidem.so -DREADELF=readelf -DNM=nm -DCXXFILT=c++filt
#         -DSOVERSION=0.1 -DWORK_DIR=dir -P check_exports.cmake

cmake_minimum_required(VERSION 3.25)

file(MAKE_DIRECTORY ${WORK_DIR})
set(shared FALSE)
if(LIBRARY MATCHES "\\.so(\\.[0-9]+)*$")
  set(shared TRUE)
endif()

set(unversioned "")
if(shared)
  execute_process(COMMAND ${NM} -D --defined-only --with-symbol-versions ${LIBRARY}
                  OUTPUT_VARIABLE table RESULT_VARIABLE failed)
  if(failed)
    message(FATAL_ERROR "${NM} -D --defined-only ${LIBRARY} failed")
  endif()
  #   Value Type Name@@VERSION; the version's own definition is an absolute symbol (A), not API.
  string(REGEX MATCHALL "[0-9a-f]+ [B-Zb-z] [^\n]+" lines "${table}")
  set(names "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[0-9a-f]+ [A-Za-z] " "" name "${line}")
    if(name MATCHES "^(.*)@@IDEM_${SOVERSION}$")
      set(name "${CMAKE_MATCH_1}")
    else()
      string(APPEND unversioned "${name}\n")
      string(REGEX REPLACE "@.*$" "" name "${name}")
    endif()
    string(APPEND names "${name}\n")
  endforeach()
else()
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
endif()
file(WRITE ${WORK_DIR}/exported_mangled.txt "${names}")
execute_process(COMMAND ${CXXFILT} INPUT_FILE ${WORK_DIR}/exported_mangled.txt
                OUTPUT_VARIABLE demangled RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "${CXXFILT} failed")
endif()
file(WRITE ${WORK_DIR}/exported.txt "${demangled}")
string(STRIP "${demangled}" demangled)
# Lists cannot hold brackets safely: [abi:cxx11] appears in names.
string(REPLACE "[" "<" demangled "${demangled}")
string(REPLACE "]" ">" demangled "${demangled}")
string(REPLACE ";" "," demangled "${demangled}")
string(REPLACE "\n" ";" exported "${demangled}")

set(problems "")
if(unversioned)
  string(APPEND problems "  without the version IDEM_${SOVERSION}:\n${unversioned}")
endif()
foreach(required IN ITEMS "idem_open" "idem_record_retryable" "idem_version"
                          "idem_last_error_code" "idem::Store::Open(" "idem::Status::ToString"
                          "idem::NewRequestId" "idem::IsRetryable(" "typeinfo for idem::Store")
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

# idem's internals: the layers' namespaces and classes (src/), never part of the API.
set(internal "idem::(util|engine|storage|backend|sharing|core)::|idem::(LeaseKeeper|LeaseStatus)([^A-Za-z0-9_]|$)")
# The allow-list of a shared library: the C API, and the public C++ API.
set(public_c "^idem_[a-z0-9_]+$")
set(public_cxx "^((typeinfo|typeinfo name|vtable) for )?idem::")

set(bad_count 0)
set(rocksdb_count 0)
set(fmt_count 0)
foreach(symbol IN LISTS exported)
  set(bad FALSE)
  if(symbol MATCHES "${internal}")
    set(bad TRUE)
  elseif(shared AND NOT symbol MATCHES "${public_c}" AND NOT symbol MATCHES "${public_cxx}")
    set(bad TRUE)
  elseif(shared AND symbol MATCHES "rocksdb::|fmt::")
    set(bad TRUE)
  endif()
  if(symbol MATCHES "rocksdb::")
    math(EXPR rocksdb_count "${rocksdb_count} + 1")
  endif()
  if(symbol MATCHES "fmt::")
    math(EXPR fmt_count "${fmt_count} + 1")
  endif()
  if(bad)
    math(EXPR bad_count "${bad_count} + 1")
    if(bad_count LESS_EQUAL 20)
      string(APPEND problems "  exported but not public API: ${symbol}\n")
    endif()
  endif()
endforeach()

list(LENGTH exported count)
if(problems)
  message(FATAL_ERROR "the exports of ${LIBRARY} are wrong: ${count} exported, ${bad_count} not "
                      "public API (${rocksdb_count} rocksdb::, ${fmt_count} fmt::), listed in "
                      "${WORK_DIR}/exported.txt:\n${problems}")
endif()
if(shared)
  message(STATUS "${LIBRARY}: ${count} exported symbols, every one public API, of version "
                 "IDEM_${SOVERSION}")
else()
  message(STATUS "${LIBRARY}: ${count} exported symbols, the public API among them; no internals")
endif()
