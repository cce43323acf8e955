#!/usr/bin/env python3
"""The agreed sizes of the library's and the command's code (docs/architecture.md, "Sizes"):
no file in src/ or tools/ over 450 lines, and no function over 60 lines, counted from the line of
its opening brace to that of its closing one.

    check_sizes.py SOURCE_DIR

Prints each file or function over its limit and exits 1 if there is one. Functions are found by
their braces, with comments and string literals blanked first: a brace whose head (the text
before it, up to the previous ';', '{' or '}') ends with a parameter list's ')' (and qualifiers)
opens a function, unless it is inside one already; namespace, class, struct, enum and union
bodies are walked into. A lambda or a local class counts toward the function around it."""

import os
import re
import sys

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 60
FOLDERS = ("src", "tools")
SUFFIXES = (".h", ".cc", ".c")


def blank(source):
    """`source` with comments, string and character literals blanked, line breaks kept."""
    keep_lines = lambda match: "\n" * match.group(0).count("\n")
    source = re.sub(r'R"([^(\s]*)\(.*?\)\1"', lambda m: '""' + keep_lines(m), source, flags=re.S)
    source = re.sub(r"//[^\n]*", "", source)
    source = re.sub(r"/\*.*?\*/", keep_lines, source, flags=re.S)
    source = re.sub(r'"(\\.|[^"\\\n])*"', '""', source)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", source)


SCOPE = re.compile(r"\b(namespace|class|struct|enum|union)\b[^;(){}]*$|extern\s*\"\"\s*$")
FUNCTION = re.compile(r"\)\s*(const|noexcept|override|final|mutable|->[^{;]*|\s)*$")


def long_functions(source):
    """(first line, lines) of every function of `source` over MAX_FUNCTION_LINES."""
    text = blank(source)
    found = []
    stack = []  # per open brace: (kind, line)
    head_start = 0
    line = 1
    for at, char in enumerate(text):
        if char == "\n":
            line += 1
        elif char in ";{}":
            if char == "{":
                head = text[head_start:at].strip()
                in_function = any(kind == "function" for kind, _ in stack)
                if SCOPE.search(head):
                    stack.append(("scope", line))
                elif not in_function and FUNCTION.search(head) and not head.endswith("="):
                    stack.append(("function", line))
                else:
                    stack.append(("block", line))
            elif char == "}" and stack:
                kind, first = stack.pop()
                if kind == "function" and line - first + 1 > MAX_FUNCTION_LINES:
                    found.append((first, line - first + 1))
            head_start = at + 1
    return found


def main():
    root = sys.argv[1]
    problems = []
    for folder in FOLDERS:
        for directory, _, files in sorted(os.walk(os.path.join(root, folder))):
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                shown = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as file:
                    source = file.read()
                lines = source.count("\n")
                if lines > MAX_FILE_LINES:
                    problems.append(f"{shown}: {lines} lines (at most {MAX_FILE_LINES})")
                for first, length in long_functions(source):
                    problems.append(f"{shown}:{first}: a function of {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES}): split it")
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"check_sizes: every file in {', '.join(FOLDERS)} within {MAX_FILE_LINES} lines, "
          f"every function within {MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
