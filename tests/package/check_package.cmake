# The installed package, used as applications and distributions use it, one STEP per CTest test
# (tests/CMakeLists.txt; the install step is their fixture):
#   install     installs the build tree into WORK_DIR/prefix; checks the installed headers
#   cxx         a C++ project: find_package(idem) + idem::idem (tests/package/CMakeLists.txt)
#   c           a C-only project (LANGUAGES C) the same way, building tests/unit/extras/c_api_test.c and the
#               example of docs/c_api.md (tests/package/c_consumer/)
#   pkg-config  a C program compiled and linked with `pkg-config` and the C compiler driver
#   tool        the installed `idem` command runs as installed (its RPATH finds libidem.so.N),
#               and its manual page idem(1) is installed in man1/
#   python      ctypes.util.find_library("idem") finds the shared library, ctypes loads it
# SHARED says whether the library is shared (libidem.so.SOVERSION) or static.
# TARGET_C_COMPILER is the project's C compiler (the pkg-config step's driver). In a cross build,
# TOOLCHAIN_FILE and CROSS_SYSROOT are the project's toolchain file and sysroot
# (cmake/toolchains/): the consumers are built with them, as a cross-compiling user's would be,
# and run through binfmt_misc and qemu (scripts/cross.sh sets QEMU_LD_PREFIX).
#   cmake -DSTEP=... -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DSHARED=ON|OFF
#         [-DVERSION=... -DSOVERSION=... -DPYTHON=... -DTARGET_C_COMPILER=...]
#         [-DTOOLCHAIN_FILE=... -DCROSS_SYSROOT=...] -P check_package.cmake
foreach(var STEP BUILD_DIR SOURCE_DIR WORK_DIR SHARED)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is not set")
  endif()
endforeach()
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
endfunction()

# The installed library directory (lib, lib64 or lib/<multiarch>): where idem's CMake package is.
function(find_libdir out)
  file(GLOB_RECURSE configs ${prefix}/*/idemConfig.cmake)
  if(NOT configs)
    message(FATAL_ERROR "idemConfig.cmake is not installed under ${prefix} (run the install step)")
  endif()
  list(GET configs 0 config)
  get_filename_component(dir ${config} DIRECTORY)  # LIBDIR/cmake/idem
  get_filename_component(dir ${dir} DIRECTORY)
  get_filename_component(dir ${dir} DIRECTORY)
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

function(step_install)
  file(REMOVE_RECURSE ${WORK_DIR})
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  file(GLOB_RECURSE headers ${prefix}/include/idem/*.h)
  if(NOT headers)
    message(FATAL_ERROR "no headers installed under ${prefix}/include/idem")
  endif()
  foreach(header ${headers})
    file(STRINGS ${header} includes REGEX "^#include <((rocksdb|boost|fmt|openssl)/|libpq)")
    if(includes)
      message(FATAL_ERROR "${header} includes a dependency's header: ${includes}")
    endif()
  endforeach()
  find_libdir(libdir)
  if(SHARED)
    # The real file, its soname link (what programs load) and the link linkers find (-lidem).
    foreach(name libidem.so.${VERSION} libidem.so.${SOVERSION} libidem.so)
      if(NOT EXISTS ${libdir}/${name})
        message(FATAL_ERROR "${libdir}/${name} is not installed")
      endif()
    endforeach()
  elseif(NOT EXISTS ${libdir}/libidem.a)
    message(FATAL_ERROR "${libdir}/libidem.a is not installed")
  endif()
  message(STATUS "installed into ${prefix}")
endfunction()

# Configures and builds a consumer project against the installed package. A cross build's
# toolchain file confines find_package to the sysroot (CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY), so
# there the consumer is pointed at the package's directory (idem_DIR) rather than its prefix; idem's
# own dependencies (RocksDB, OpenSSL, libpq) are then found in the sysroot.
function(build_consumer name source_dir)
  if(TOOLCHAIN_FILE)
    find_libdir(libdir)
    set(find_idem -DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE} -DIDEM_CROSS_SYSROOT=${CROSS_SYSROOT}
                  -Didem_DIR=${libdir}/cmake/idem)
  else()
    set(find_idem -DCMAKE_PREFIX_PATH=${prefix})
  endif()
  run(${CMAKE_COMMAND} -S ${source_dir} -B ${WORK_DIR}/${name} ${find_idem}
      -DCMAKE_BUILD_TYPE=Release ${ARGN})
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/${name} -j2)
endfunction()

function(step_cxx)
  build_consumer(cxx ${SOURCE_DIR}/tests/package)
  # The store in $TMPDIR when it is set: scripts/cross.sh puts it on a tmpfs, as a 32-bit program
  # under qemu on a 64-bit kernel cannot read a hashed ext4 directory (docs/cross.md).
  if(IS_DIRECTORY "$ENV{TMPDIR}")
    string(RANDOM LENGTH 8 suffix)
    set(store "$ENV{TMPDIR}/idem-package-cxx-${suffix}")
  else()
    set(store ${WORK_DIR}/cxx_store)
  endif()
  run(${WORK_DIR}/cxx/consumer ${store})
  file(REMOVE_RECURSE ${store})
  message(STATUS "find_package(idem) consumer (C++) built and ran")
endfunction()

function(step_c)
  # The example of docs/c_api.md, extracted into OUT.
  set(MARKDOWN ${SOURCE_DIR}/docs/c_api.md)
  set(OUT ${WORK_DIR}/c_api_example.c)
  include(${SOURCE_DIR}/tests/docs/c_api_example.cmake)
  build_consumer(c ${SOURCE_DIR}/tests/package/c_consumer
                 -DC_API_TEST=${SOURCE_DIR}/tests/unit/extras/c_api_test.c -DDOC_EXAMPLE=${OUT})
  run(${WORK_DIR}/c/c_consumer)
  message(STATUS "find_package(idem) consumer (C only) built and ran; the docs' example built")
endfunction()

# pkg-config's flags for idem (--cflags, --libs, ...), as a list.
function(pkg_config out)
  execute_process(COMMAND ${PKG_CONFIG} ${ARGN} idem RESULT_VARIABLE code
                  OUTPUT_VARIABLE flags ERROR_VARIABLE error OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} idem failed (${code}): ${error}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

# The pkg-config file: installed, relocatable, and enough to build and run a C program
# (tests/unit/extras/c_api_test.c, compiled as C99 and linked by the C compiler driver): with --static for the
# static library, without for the shared one.
function(step_pkg_config)
  file(GLOB_RECURSE pc_files ${prefix}/*/pkgconfig/idem.pc)
  if(NOT pc_files)
    message(FATAL_ERROR "idem.pc is not installed under ${prefix}")
  endif()
  list(GET pc_files 0 pc_file)
  get_filename_component(pc_dir ${pc_file} DIRECTORY)
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
  set(compile ${TARGET_C_COMPILER})
  if(NOT TARGET_C_COMPILER)
    find_program(C_COMPILER NAMES cc gcc clang REQUIRED)
    set(compile ${C_COMPILER})
  endif()
  if(SHARED)
    # Only idem.pc: the shared library's users need no other package's .pc file (RocksDB's).
    set(ENV{PKG_CONFIG_LIBDIR} "${pc_dir}")
  else()
    set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  endif()
  if(CROSS_SYSROOT)
    # The target's compiler driver in the sysroot, and the target's .pc files (RocksDB's, OpenSSL's)
    # in place of the build machine's. Their paths are the target's /usr: pkg-config leaves out its
    # system include directory and the driver finds the headers and libraries in the sysroot. No
    # PKG_CONFIG_SYSROOT_DIR: it would be put before idem.pc's own paths too, which are not in it.
    list(APPEND compile --sysroot=${CROSS_SYSROOT})
    if(NOT SHARED)
      execute_process(COMMAND ${TARGET_C_COMPILER} -print-multiarch OUTPUT_VARIABLE multiarch
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      set(ENV{PKG_CONFIG_LIBDIR}
          "${CROSS_SYSROOT}/usr/lib/${multiarch}/pkgconfig:${CROSS_SYSROOT}/usr/share/pkgconfig")
    endif()
  endif()

  pkg_config(cflags --cflags)
  if(SHARED)
    pkg_config(libs --libs)
  else()
    pkg_config(libs --static --libs)
  endif()
  # The prefix is relative to the file's location: -I.../lib/pkgconfig/../../include must be ours.
  set(include_found FALSE)
  foreach(flag ${cflags})
    if(flag MATCHES "^-I(.*)$")
      file(REAL_PATH "${CMAKE_MATCH_1}" include_dir)
      file(REAL_PATH "${prefix}/include" expected_dir)
      if(include_dir STREQUAL expected_dir AND EXISTS "${include_dir}/idem/c.h")
        set(include_found TRUE)
      endif()
    endif()
  endforeach()
  if(NOT include_found)
    message(FATAL_ERROR "pkg-config --cflags idem gives '${cflags}', not ${prefix}/include")
  endif()
  string(REPLACE ";" " " libs_text "${libs}")
  if(NOT libs_text MATCHES "(^| )-lidem( |$)")
    message(FATAL_ERROR "pkg-config --libs idem gives '${libs_text}', without -lidem")
  endif()

  # The C header alone is C89 (with <stdint.h>) and C++.
  file(WRITE ${WORK_DIR}/c_header.c "#include <idem/c.h>\nint main(void) { return IDEM_OK; }\n")
  run(${compile} -std=c89 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only ${cflags}
      ${WORK_DIR}/c_header.c)
  run(${compile} -x c++ -std=c++11 -pedantic-errors -Wall -Wextra -Werror -fsyntax-only
      ${cflags} ${WORK_DIR}/c_header.c)

  run(${compile} -std=c99 -Wall -Wextra -Werror ${cflags}
      "-DIDEM_EXPECTED_VERSION=\"${VERSION}\"" ${SOURCE_DIR}/tests/unit/extras/c_api_test.c ${libs} -pthread
      -o ${WORK_DIR}/pkg_config_consumer)
  # The program has no RPATH: the loader finds the shared library as a user's would be told to.
  find_libdir(libdir)
  run(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libdir} ${WORK_DIR}/pkg_config_consumer)
  message(STATUS "pkg-config consumer (C) built and ran")
endfunction()

# The installed command runs with no help from the environment (exit 127 when the loader cannot
# find libidem.so.N), and loads the installed library, not the build tree's.
function(step_tool)
  set(tool ${prefix}/bin/idem)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${tool} --version
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT code EQUAL 0 OR NOT out MATCHES "${VERSION}")
    message(FATAL_ERROR "the installed ${tool} --version: exit ${code}, '${out}'")
  endif()
  if(SHARED)
    find_libdir(libdir)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH
                            LD_TRACE_LOADED_OBJECTS=1 ${tool}
                    RESULT_VARIABLE code OUTPUT_VARIABLE loaded ERROR_VARIABLE loaded)
    file(REAL_PATH ${libdir}/libidem.so.${SOVERSION} installed)
    if(NOT loaded MATCHES "libidem\\.so\\.${SOVERSION} => ([^ ]+) ")
      message(FATAL_ERROR "${tool} does not load libidem.so.${SOVERSION}:\n${loaded}")
    endif()
    file(REAL_PATH ${CMAKE_MATCH_1} used)
    if(NOT used STREQUAL installed)
      message(FATAL_ERROR "${tool} loads ${used}, not the installed ${installed}")
    endif()
  endif()
  # Its manual page, installed beside it (man idem): the --help texts point to it.
  file(GLOB_RECURSE pages ${prefix}/*idem.1)
  list(FILTER pages INCLUDE REGEX "/man1/idem\\.1$")
  if(NOT pages)
    message(FATAL_ERROR "the idem(1) manual page is not installed under ${prefix} (man1/idem.1)")
  endif()
  message(STATUS "the installed idem command runs (${out}); its manual page is ${pages}")
endfunction()

# Python programs find and load the shared library after it is installed in a prefix that the
# loader searches (LD_LIBRARY_PATH here, ldconfig's cache for a system directory).
function(step_python)
  find_libdir(libdir)
  run(${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${libdir} LIBRARY_PATH=${libdir}
      ${PYTHON} ${SOURCE_DIR}/tests/package/find_library.py libidem.so.${SOVERSION} ${VERSION}
      ${WORK_DIR}/python_store)
  message(STATUS "ctypes.util.find_library('idem') found libidem.so.${SOVERSION} and loaded it")
endfunction()

if(STEP STREQUAL "install")
  step_install()
elseif(STEP STREQUAL "cxx")
  step_cxx()
elseif(STEP STREQUAL "c")
  step_c()
elseif(STEP STREQUAL "pkg-config")
  step_pkg_config()
elseif(STEP STREQUAL "tool")
  step_tool()
elseif(STEP STREQUAL "python")
  step_python()
else()
  message(FATAL_ERROR "unknown STEP '${STEP}'")
endif()
