# The manual page idem(1) (docs/idem.1) against the command it documents:
#   - groff renders it with every warning on (-ww) and says nothing;
#   - every command that `idem --help` lists appears as `.B idem COMMAND`, and every long flag
#     that `idem --help` or `idem COMMAND --help` lists appears in it (as \-\-flag\-name), so the
#     page cannot fall behind the command.
# Run with -DIDEM=<the idem binary> -DGROFF=<groff> -DPAGE=<docs/idem.1>.

execute_process(COMMAND ${GROFF} -man -Tutf8 -ww -z ${PAGE}
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE warnings)
if(NOT code EQUAL 0 OR NOT warnings STREQUAL "")
  message(FATAL_ERROR "groff -man -ww ${PAGE}: exit ${code}\n${warnings}")
endif()

file(READ ${PAGE} page)

function(help_of out)
  execute_process(COMMAND ${IDEM} ${ARGN} --help RESULT_VARIABLE code OUTPUT_VARIABLE text
                  ERROR_VARIABLE text)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "idem ${ARGN} --help: exit ${code}\n${text}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The long flags of a help text must be in the page.
function(check_flags where text)
  string(REGEX MATCHALL "--[a-z][a-z-]*" flags "${text}")
  list(REMOVE_DUPLICATES flags)
  foreach(flag IN LISTS flags)
    string(REPLACE "-" "\\-" escaped "${flag}")
    string(FIND "${page}" "${escaped}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${where} lists ${flag}, which idem(1) does not mention")
    endif()
  endforeach()
endfunction()

help_of(main)
check_flags("idem --help" "${main}")
# CLI11 lists the subcommands under "SUBCOMMANDS:" (or "Subcommands:"), one per line.
string(REGEX MATCH "[Ss][Uu][Bb][Cc][Oo][Mm][Mm][Aa][Nn][Dd][Ss]:\n(.*)" _ "${main}")
string(REGEX MATCHALL "\n  ([a-z]+) " lines "\n${CMAKE_MATCH_1}")
set(commands)
foreach(line IN LISTS lines)
  string(STRIP "${line}" command)
  list(APPEND commands ${command})
endforeach()
if(NOT commands)
  message(FATAL_ERROR "found no command in idem --help:\n${main}")
endif()
foreach(command IN LISTS commands)
  string(FIND "${page}" ".B idem ${command}\n" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "idem --help lists the command ${command}, which idem(1) does not")
  endif()
  help_of(text ${command})
  check_flags("idem ${command} --help" "${text}")
endforeach()
message(STATUS "idem(1) renders cleanly and covers the commands ${commands} and their flags")
