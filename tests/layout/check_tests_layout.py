#!/usr/bin/env python3
"""The tests' layout (docs/architecture.md, "Where the tests are"), kept true:

    check_tests_layout.py SOURCE_DIR TEST_MAP LAYERS OFF_LAYERS

TEST_MAP is build/tests/test_map.txt, one registered test program a line, `name|source|labels`
(source relative to tests/, labels comma-separated), written at configure. LAYERS and OFF_LAYERS
are the library's layers (src/CMakeLists.txt's IDEM_LAYERS, IDEM_LAYERS_OFF), ';'-separated.

Fails, naming each file and what to do, if:
- a test source (`*_test.cc`, `*_test.c`) lies outside tests/unit/<layer>/ and tests/system/, or
  a folder under tests/unit/ is not a layer's;
- a test source's name does not appear in tests/CMakeLists.txt (written but never registered);
- a unit test does what only a system test may: start a process (fork, posix_spawn, a waiting
  child, the idem command, the sharing worker), include a helper that does (namespaces, power
  cuts, a PostgreSQL server of its own, the command's runner, a TCP proxy), link the command
  (label layer:tools) or carry label postgres;
- a unit test in tests/unit/<L>/ includes no header of src/<L>/ (for api, core and extras, the
  public headers include/idem/ count): it is not written against the layer it sits in;
- a script or preset selects a CTest label with an unanchored regex (`-L core` also matches
  `layer:core`): write `-L '^core$'`."""

import os
import re
import sys

TEST_SOURCE = re.compile(r"_test\.(cc|c)$")
# What only a system test may do, in a unit test's code (comments blanked).
UNIT_FORBIDDEN_CODE = re.compile(
    r"\b(fork|vfork|posix_spawnp?|execv[pe]?|execl[pe]?)\s*\(|\bWaitingChild\b|"
    r"\bIDEM_TOOL_PATH\b|\bIDEM_SHARING_WORKER\b")
UNIT_FORBIDDEN_HELPERS = ("child_awaiting_go", "namespaced_process", "sharing_worker", "pg_server",
                          "pg_pool_test_util", "power_cut_fs", "cli_run", "tcp_proxy")
UNIT_FORBIDDEN_LABELS = ("postgres", "layer:tools")
# Layers whose public face is include/idem/.
PUBLIC_LAYERS = ("api", "core", "extras")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
UNANCHORED_FLAG = re.compile(r"(?<![\w-])-LE?\s+(?![\"']?\^)[\"']?([\w:/.-]+)")
UNANCHORED_PRESET = re.compile(r'"label"\s*:\s*"(?!\^)([^"]*)"')


def without_comments(source):
    source = re.sub(r"//[^\n]*", "", source)
    return re.sub(r"/\*.*?\*/", "", source, flags=re.S)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_sources(tests_dir):
    """Every test source under tests/, relative to it."""
    found = []
    for root, dirs, files in os.walk(tests_dir):
        dirs[:] = sorted(d for d in dirs if d != "data")
        for name in sorted(files):
            if TEST_SOURCE.search(name):
                found.append(os.path.relpath(os.path.join(root, name), tests_dir))
    return found


def check_places(tests_dir, sources, layers, problems):
    registered = read(os.path.join(tests_dir, "CMakeLists.txt"))
    for source in sources:
        folder, name = os.path.split(source)
        stem = os.path.splitext(name)[0]
        if folder.startswith("unit/"):
            layer = folder[len("unit/"):]
            if layer not in layers:
                problems.append(f"tests/{source}: tests/unit/{layer}/ is no layer's folder (the "
                                f"layers: {', '.join(sorted(layers))}); move it to the folder of "
                                "the layer it tests, or to tests/system/")
        elif folder != "system":
            problems.append(f"tests/{source}: a test lies in tests/unit/<layer>/ (in-process, "
                            "one layer) or tests/system/ (the rest); move it")
        if not re.search(rf"\b{re.escape(stem)}\b", registered):
            problems.append(f"tests/{source}: {stem} is not registered in tests/CMakeLists.txt "
                            f"(idem_add_test({stem} ...))")


def check_unit_test(tests_dir, source, labels, problems):
    layer = os.path.dirname(source)[len("unit/"):]
    text = read(os.path.join(tests_dir, source))
    code = without_comments(text)
    includes = INCLUDE.findall(code)
    for match in UNIT_FORBIDDEN_CODE.finditer(code):
        problems.append(f"tests/{source}: `{match.group(0).strip()}` starts a process or a "
                        "program: that is a system test (tests/system/)")
    for include in includes:
        helper = os.path.splitext(os.path.basename(include))[0]
        if include.startswith("support/") and helper in UNIT_FORBIDDEN_HELPERS:
            problems.append(f"tests/{source}: includes {include}, a system test's helper: "
                            "move the test to tests/system/")
    for label in UNIT_FORBIDDEN_LABELS:
        if label in labels:
            problems.append(f"tests/{source}: label {label} (a server or the command): that is "
                            "a system test (tests/system/)")
    own = [i for i in includes if os.path.dirname(i) == layer or
           (layer in PUBLIC_LAYERS and i.startswith("idem/"))]
    if not own:
        problems.append(f"tests/{source}: includes no header of src/{layer}/"
                        f"{' or include/idem/' if layer in PUBLIC_LAYERS else ''}: move it to the "
                        "folder of the layer it tests")


def check_selectors(source_dir, problems):
    scripts = os.path.join(source_dir, "scripts")
    paths = [os.path.join(scripts, n) for n in sorted(os.listdir(scripts)) if n.endswith(".sh")]
    paths.append(os.path.join(source_dir, ".ci", "run"))
    for path in paths:
        if not os.path.exists(path):
            continue
        for number, line in enumerate(read(path).splitlines(), 1):
            if "ctest" not in line:
                continue
            for match in UNANCHORED_FLAG.finditer(line):
                problems.append(f"{os.path.relpath(path, source_dir)}:{number}: ctest label "
                                f"{match.group(1)} unanchored: write '^{match.group(1)}$'")
    presets = os.path.join(source_dir, "CMakePresets.json")
    for match in UNANCHORED_PRESET.finditer(read(presets)):
        problems.append(f"CMakePresets.json: label \"{match.group(1)}\" unanchored: write "
                        f"\"^{match.group(1)}$\"")


def main(argv):
    if len(argv) != 5:
        sys.exit(__doc__)
    source_dir, test_map = argv[1], argv[2]
    layers = set(filter(None, argv[3].split(";"))) | set(filter(None, argv[4].split(";")))
    tests_dir = os.path.join(source_dir, "tests")
    labels_of = {}
    for line in read(test_map).splitlines():
        name, source, labels = line.split("|")
        labels_of[source] = labels.split(",")
    problems = []
    sources = test_sources(tests_dir)
    check_places(tests_dir, sources, layers, problems)
    for source in sources:
        if source.startswith("unit/"):
            check_unit_test(tests_dir, source, labels_of.get(source, []), problems)
    check_selectors(source_dir, problems)
    for problem in problems:
        print(problem)
    print(f"{len(sources)} test sources, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
