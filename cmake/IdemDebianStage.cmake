# CPack runs this after it has installed a package's files into its staging directory and before
# it packs them (CPACK_PRE_BUILD_SCRIPTS; cmake/IdemDebianPackage.cmake). Debian's policy 12.3
# and lintian want manual pages and changelogs compressed with `gzip -9n` (no name or time
# stamp: the same input makes the same package).
find_program(GZIP gzip REQUIRED)
file(GLOB_RECURSE staged LIST_DIRECTORIES false "${CPACK_TEMPORARY_DIRECTORY}/*")
foreach(path IN LISTS staged)
  if(path MATCHES "/share/man/man[1-9]/[^/]+\\.[1-9]$" OR path MATCHES "/share/doc/.*/changelog\\.Debian$")
    execute_process(COMMAND ${GZIP} -9nf ${path} COMMAND_ERROR_IS_FATAL ANY)
  endif()
endforeach()
