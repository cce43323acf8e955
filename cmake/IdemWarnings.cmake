# The compiler warnings of every target of the project, set in one place.
#
# idem_set_warnings(<target>) gives a target the project's warnings; idem_warn_every_target(),
# called once at the end of the top-level CMakeLists.txt, gives them to every target defined
# under the source tree (library layers, tools, tests, examples, benchmarks, fuzzers), so that
# none is forgotten. With IDEM_WERROR=ON (scripts/test.sh and CI), a warning fails the build.

option(IDEM_WERROR "Treat compiler warnings as errors (scripts/test.sh turns it on)" OFF)
# Clang's thread-safety analysis (src/util/thread_annotations.h) warns in every clang build; the
# preset clang-thread-safety makes its findings errors without making clang's other warnings so.
option(IDEM_WERROR_THREAD_SAFETY "Treat clang's -Wthread-safety(-beta) findings as errors" OFF)

function(idem_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic>
    # Designated initializers such as {.lease = 1s} leave the other fields defaulted on purpose.
    $<$<COMPILE_LANGUAGE:CXX>:-Wno-missing-field-initializers>
    $<$<AND:$<BOOL:${IDEM_WERROR}>,$<COMPILE_LANGUAGE:C,CXX>>:-Werror>
    # -beta adds the lock order (IDEM_ACQUIRED_AFTER).
    $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wthread-safety>
    $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wthread-safety-beta>
    $<$<AND:$<COMPILE_LANG_AND_ID:CXX,Clang>,$<BOOL:${IDEM_WERROR_THREAD_SAFETY}>>:-Werror=thread-safety>
    $<$<AND:$<COMPILE_LANG_AND_ID:CXX,Clang>,$<BOOL:${IDEM_WERROR_THREAD_SAFETY}>>:-Werror=thread-safety-beta>)
endfunction()

# Every compiled target in `directory` and below.
function(idem_collect_targets directory out)
  get_property(targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(children DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(child IN LISTS children)
    idem_collect_targets(${child} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(idem_warn_every_target)
  idem_collect_targets(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      idem_set_warnings(${target})
    endif()
  endforeach()
endfunction()
