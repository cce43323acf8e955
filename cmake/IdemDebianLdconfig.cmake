# CPack runs this on the packages it made (CPACK_POST_BUILD_SCRIPTS;
# cmake/IdemDebianPackage.cmake). For a shared library in /usr/lib, CPack 3.25 writes postinst
# and postrm scripts that call ldconfig, which Debian has replaced with a trigger: lintian calls
# the scripts maintscript-calls-ldconfig (a warning) and the missing trigger
# lacks-ldconfig-trigger (an error). The library's package is unpacked, its scripts replaced by
# `activate-noawait ldconfig` (what debhelper writes), and packed again; its files and their
# md5sums are unchanged.
find_program(DPKG_DEB dpkg-deb REQUIRED)
foreach(package IN LISTS CPACK_PACKAGE_FILES)
  if(NOT package MATCHES "\\.deb$")
    continue()
  endif()
  set(unpacked ${package}.unpacked)
  file(REMOVE_RECURSE ${unpacked})
  execute_process(COMMAND ${DPKG_DEB} --raw-extract ${package} ${unpacked}
                  COMMAND_ERROR_IS_FATAL ANY)
  set(control ${unpacked}/DEBIAN)
  if(EXISTS ${control}/postinst AND EXISTS ${control}/shlibs)
    file(READ ${control}/postinst postinst)
    if(NOT postinst MATCHES "ldconfig")
      message(FATAL_ERROR "${package}: CPack's postinst does not call ldconfig: review "
                          "cmake/IdemDebianLdconfig.cmake\n${postinst}")
    endif()
    file(REMOVE ${control}/postinst ${control}/postrm)
    file(WRITE ${control}/triggers "activate-noawait ldconfig\n")
    execute_process(COMMAND ${DPKG_DEB} --root-owner-group --build ${unpacked} ${package}
                    OUTPUT_QUIET COMMAND_ERROR_IS_FATAL ANY)
  endif()
  file(REMOVE_RECURSE ${unpacked})
endforeach()
