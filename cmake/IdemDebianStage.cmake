# CPack runs this after it has installed a package's files into its staging directory and before
# it packs them (CPACK_PRE_BUILD_SCRIPTS; cmake/IdemDebianPackage.cmake):
# - Debian's policy 12.3 and lintian want manual pages and changelogs compressed with
#   `gzip -9n` (no name or time stamp: the same input makes the same package);
# - the ELF files lose their .comment section (each compiler's version string, which lintian
#   reports as binary-has-unneeded-section, as dh_strip removes it).
find_program(GZIP gzip REQUIRED)
find_program(OBJCOPY objcopy REQUIRED)
file(GLOB_RECURSE staged LIST_DIRECTORIES false "${CPACK_TEMPORARY_DIRECTORY}/*")
foreach(path IN LISTS staged)
  if(IS_SYMLINK ${path})
    continue()
  endif()
  if(path MATCHES "/share/man/man[1-9]/[^/]+\\.[1-9]$" OR path MATCHES "/share/doc/.*/changelog\\.Debian$")
    execute_process(COMMAND ${GZIP} -9nf ${path} COMMAND_ERROR_IS_FATAL ANY)
    continue()
  endif()
  file(READ ${path} magic LIMIT 4 HEX)
  if(magic STREQUAL "7f454c46")  # \x7fELF
    execute_process(COMMAND ${OBJCOPY} --remove-section=.comment ${path} COMMAND_ERROR_IS_FATAL ANY)
  endif()
endforeach()
