"""Loads the installed shared library as a Python program would, through ctypes.

ctypes.util.find_library("idem") must find it (here through LD_LIBRARY_PATH and LIBRARY_PATH,
which tests/package/check_package.cmake points at the installed library directory; ldconfig's
cache once it is installed in a system directory) and answer with its soname; ctypes.CDLL then
loads it and the C API answers: its version, and an error code as an integer.

    find_library.py EXPECTED_SONAME EXPECTED_VERSION STORE_DIR

Exits 0 when every check passes, 1 naming the first that failed.
"""

import ctypes
import ctypes.util
import sys

IDEM_OK = 0
IDEM_NOT_FOUND = 2


def fail(message):
    print(f"find_library.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 4:
        fail("usage: find_library.py EXPECTED_SONAME EXPECTED_VERSION STORE_DIR")
    soname, version, store_dir = sys.argv[1:]

    name = ctypes.util.find_library("idem")
    if name != soname:
        fail(f"ctypes.util.find_library('idem') gives {name!r}, not {soname!r}")
    lib = ctypes.CDLL(name)

    lib.idem_version.restype = ctypes.c_char_p
    lib.idem_version.argtypes = []
    if lib.idem_version().decode() != version:
        fail(f"idem_version() is {lib.idem_version()!r}, not {version!r}")

    # A store: open it, forget a key it does not hold (IDEM_NOT_FOUND, as an integer), close it.
    # No errptr (NULL): the codes say enough here.
    lib.idem_open.restype = ctypes.c_void_p
    lib.idem_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.idem_forget.restype = ctypes.c_int
    lib.idem_forget.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.idem_last_error_code.restype = ctypes.c_int
    lib.idem_close.argtypes = [ctypes.c_void_p]
    store = lib.idem_open(store_dir.encode(), None, None)
    if not store:
        fail(f"idem_open({store_dir!r}) failed with code {lib.idem_last_error_code()}")
    code = lib.idem_forget(store, b"absent", 6, None)
    lib.idem_close(store)
    if code != IDEM_NOT_FOUND:
        fail(f"idem_forget of an absent key returned {code}, not IDEM_NOT_FOUND")
    print(f"find_library('idem') = {name}, idem_version() = {version}")


if __name__ == "__main__":
    main()
