# Proves that the layers of src/ are enforced by the build (src/CMakeLists.txt,
# docs/architecture.md): for every pair of layers (L, M), a source of L that includes a header of
# M preprocesses with L's include directories (the header and everything it includes are found)
# exactly when M is L itself or below it, and otherwise fails because the header is not found.
# Each layer's include directories are read from its object library (idem_<layer>), so the check
# sees what the build uses. Both outcomes must occur, so the check cannot pass vacuously. Also
# refuses `#include "../..."` and absolute includes in src/, the one way around an include root.
#
# A layer may be a subfolder of another (storage/rocksdb under storage), and its root then holds
# the parent's files one by one (src/CMakeLists.txt). Two more ways around a root follow, and are
# refused: a quoted include is looked for first in the including file's own folder, so
# src/storage/storage.cc could write "rocksdb/layout.h"; hence every quoted include in src/ is
# written from src/, its folder a layer (or include/'s idem/). And a folder under src/ that is no
# layer would be hidden by its parent's per-file links; hence every folder is a layer (or one
# switched off in this build: OFF_LAYERS).
#
# Run by CTest (tests/CMakeLists.txt) with:
#   -DCXX=<compiler> -DSOURCE_DIR=<repo> -DWORK_DIR=<scratch> -DLAYERS=a|b|...
#   -DVISIBLE_<layer>=a|b|... -DINCLUDES_<layer>=dir|dir|... -DEXTRA_INCLUDES=dir|...
#   -DOFF_LAYERS=a|...
cmake_minimum_required(VERSION 3.25)
foreach(var CXX SOURCE_DIR WORK_DIR LAYERS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()
string(REPLACE "|" ";" layers "${LAYERS}")
string(REPLACE "|" ";" extra_includes "${EXTRA_INCLUDES}")
string(REPLACE "|" ";" off_layers "${OFF_LAYERS}")
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

set(allowed_checked 0)
set(forbidden_checked 0)
set(failures "")
foreach(layer IN LISTS layers)
  string(REPLACE "|" ";" visible "${VISIBLE_${layer}}")
  string(REPLACE "|" ";" includes "${INCLUDES_${layer}}")
  if(NOT includes)
    message(FATAL_ERROR "no include directories for layer ${layer}")
  endif()
  # Preprocessed only: whether a layer may use a header is whether the header and all it
  # includes are found with the layer's include directories; that they compile is the build's
  # own check. (Parsing each probe, with RocksDB's headers and the standard library behind it,
  # made this the slowest test of the suite: 57 s against about 10 s.)
  set(flags -std=c++20 -E -o /dev/null)
  foreach(dir IN LISTS includes extra_includes)
    if(dir)
      list(APPEND flags -I${dir})
    endif()
  endforeach()
  foreach(other IN LISTS layers)
    # The probe: the first header of the other layer (a layer may have none: api).
    file(GLOB headers RELATIVE ${SOURCE_DIR}/src ${SOURCE_DIR}/src/${other}/*.h)
    if(NOT headers)
      continue()
    endif()
    list(SORT headers)
    list(GET headers 0 header)
    string(REPLACE "/" "_" probe "${layer}_includes_${other}.cc")
    set(probe ${WORK_DIR}/${probe})
    file(WRITE ${probe} "#include \"${header}\"\n")
    execute_process(COMMAND ${CXX} ${flags} ${probe}
                    RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(other IN_LIST visible)
      math(EXPR allowed_checked "${allowed_checked} + 1")
      if(NOT code EQUAL 0)
        string(APPEND failures "\n${layer} may include ${header}, but it is not found whole:\n${out}")
      endif()
    else()
      math(EXPR forbidden_checked "${forbidden_checked} + 1")
      string(REPLACE "." "\\." header_regex "${header}")
      if(code EQUAL 0)
        string(APPEND failures "\n${layer} must not include ${header}, yet it is found")
      elseif(NOT out MATCHES "${header_regex}.*(No such file or directory|file not found)"
             AND NOT out MATCHES "(No such file or directory|file not found).*${header_regex}")
        string(APPEND failures
               "\n${layer} including ${header} failed, but not for want of the header:\n${out}")
      endif()
    endif()
  endforeach()
endforeach()

# Quoted includes that climb out of a folder, or name a file by its absolute path, would reach
# any layer whatever the include root.
file(GLOB_RECURSE sources ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cc)
foreach(source IN LISTS sources)
  file(STRINGS ${source} bad REGEX "^[ \t]*#[ \t]*include[ \t]*\"(/|[^\"]*\\.\\./)")
  if(bad)
    string(APPEND failures "\n${source}: an include around the layers: ${bad}")
  endif()
  file(STRINGS ${source} quoted REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS quoted)
    string(REGEX REPLACE "^[^\"]*\"([^\"]*)/[^/\"]*\".*" "\\1" dir "${line}")
    if(dir STREQUAL line
       OR NOT (dir IN_LIST layers OR dir IN_LIST off_layers OR dir MATCHES "^idem"))
      string(APPEND failures "\n${source}: an include not written from src/: ${line}")
    endif()
  endforeach()
endforeach()

# Every folder under src/ is a layer: an ordinary subfolder of a layer would be hidden by the
# parent's per-file links in the roots of the layers above.
file(GLOB_RECURSE folders LIST_DIRECTORIES true RELATIVE ${SOURCE_DIR}/src ${SOURCE_DIR}/src/*)
foreach(folder IN LISTS folders)
  if(IS_DIRECTORY ${SOURCE_DIR}/src/${folder} AND NOT folder IN_LIST layers
     AND NOT folder IN_LIST off_layers)
    string(APPEND failures "\nsrc/${folder} is a folder but no layer (src/CMakeLists.txt)")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "layer check failed:${failures}")
endif()
if(allowed_checked EQUAL 0 OR forbidden_checked EQUAL 0)
  message(FATAL_ERROR "vacuous: ${allowed_checked} allowed and ${forbidden_checked} forbidden "
                      "includes checked")
endif()
message(STATUS "layers: ${allowed_checked} allowed includes are found, ${forbidden_checked} "
               "wrong-way includes fail")
