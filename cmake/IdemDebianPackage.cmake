# The Debian packages: `cpack -G DEB` in a shared build configured for /usr (the preset package;
# scripts/package.sh runs it). The three install components become three packages:
#
#   libidem<soversion>  the shared library (component library), named from its soname as
#                       Debian's policy 8.1 asks, with a shlibs file
#   libidem-dev         headers, the libidem.so link, the CMake package, idem.pc (development)
#   idem                the command, its man page, bash completion, the systemd units, the docs
#                       (command)
#
# and a -dbgsym package of the debug information of each of the first and the last (the build
# is RelWithDebInfo, the same objects the tests ran; the packages' files are stripped). Each
# package's Depends comes from dpkg-shlibdeps and the components' own dependencies (= version).
# IDEM_DEBIAN_PACKAGE (the preset package sets it) adds what Debian wants in each package's
# /usr/share/doc/<package>: its copyright and changelog.Debian.gz, and its lintian overrides;
# cmake/IdemDebianStage.cmake compresses the man page and the changelog in the staging
# directory, as policy 12.3 asks, and drops the ELF files' .comment section;
# cmake/IdemDebianLdconfig.cmake gives the library's package
# the ldconfig trigger in place of the scripts CPack writes.

option(IDEM_DEBIAN_PACKAGE "Install what the Debian packages need besides the files (copyright, \
changelog and lintian overrides per package; scripts/package.sh)" OFF)
set(IDEM_PACKAGE_MAINTAINER "idem developers <idem@example.org>" CACHE STRING
    "The Maintainer of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idem)
set(CPACK_PACKAGE_VENDOR "the idem developers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${IDEM_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL library development command)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENT_DEVELOPMENT_DEPENDS library)
set(CPACK_COMPONENT_COMMAND_DEPENDS library)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The command needs libidem.so.N, which is in no installed package yet: dpkg-shlibdeps finds it
# in the build tree (its dependency is the component's, above).
get_target_property(library_build_dir idem BINARY_DIR)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${library_build_dir})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/IdemDebianStage.cmake)
set(CPACK_POST_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/IdemDebianLdconfig.cmake)

set(library_package libidem${IDEM_SOVERSION})
set(CPACK_DEBIAN_LIBRARY_PACKAGE_NAME ${library_package})
set(CPACK_DEBIAN_LIBRARY_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIBRARY_DESCRIPTION "embedded idempotency store (shared library)
idem makes running a request at most once, and answering every retry
with the first answer, a library call: records live in RocksDB inside the
process, keys are claimed atomically with leases and fencing tokens, and
several processes on one host share one store. The same API runs on a
PostgreSQL table beyond one host.
.
This package contains the shared library.")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libidem-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "embedded idempotency store (development files)
idem makes running a request at most once, and answering every retry
with the first answer, a library call, on RocksDB inside the process or on a
PostgreSQL table.
.
This package contains the C++ and C headers, the CMake package
(find_package(idem)) and the pkg-config file.")
set(CPACK_DEBIAN_COMMAND_PACKAGE_NAME idem)
set(CPACK_DEBIAN_COMMAND_PACKAGE_SECTION admin)
set(CPACK_COMPONENT_COMMAND_DESCRIPTION "embedded idempotency store (command)
idem makes running a request at most once, and answering every retry
with the first answer, a library call, on RocksDB inside the process or on a
PostgreSQL table.
.
This package contains the idem command, which inspects, checks, purges,
backs up, exports and imports stores, its systemd template units for
purge and statistics timers, and the documentation.")

if(IDEM_DEBIAN_PACKAGE)
  string(TIMESTAMP changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)  # honours SOURCE_DATE_EPOCH
  set(debian_version ${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE})
  foreach(component_package IN ITEMS library:${library_package} development:libidem-dev
                                     command:idem)
    string(REPLACE ":" ";" pair ${component_package})
    list(GET pair 0 component)
    list(GET pair 1 package)
    set(doc_dir ${CMAKE_INSTALL_DATADIR}/doc/${package})
    file(WRITE ${PROJECT_BINARY_DIR}/debian/${package}/changelog.Debian
"${package} (${debian_version}) unstable; urgency=medium

  * Built from the idem sources by scripts/package.sh.

 -- ${IDEM_PACKAGE_MAINTAINER}  ${changelog_date}
")
    install(FILES ${PROJECT_BINARY_DIR}/debian/${package}/changelog.Debian
            DESTINATION ${doc_dir} COMPONENT ${component})
    install(FILES ${PROJECT_SOURCE_DIR}/cmake/debian-copyright DESTINATION ${doc_dir}
            RENAME copyright COMPONENT ${component})
    # lintian's remaining tags, each with why it stays (lintian prints the comment).
    file(WRITE ${PROJECT_BINARY_DIR}/debian/${package}/lintian-overrides
"# Built from the idem sources by scripts/package.sh, not uploaded to Debian: no ITP bug to close.
${package}: initial-upload-closes-no-bugs
")
    install(FILES ${PROJECT_BINARY_DIR}/debian/${package}/lintian-overrides
            DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME ${package}
            COMPONENT ${component})
  endforeach()
endif()

include(CPack)
