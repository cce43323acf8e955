#!/usr/bin/env python3
"""Prints the code point ranges of tools/display_width.cc: those a terminal shows in two
columns (East Asian Width W or F) and those it shows in none (combining and enclosing marks,
format characters, Hangul medial vowels and final consonants), from Python's Unicode database.

Run: python3 scripts/display_width_table.py > /tmp/tables.txt, then paste the two arrays into
tools/display_width.cc and update the Unicode version named there.
"""
import sys
import unicodedata

# Blocks whose unassigned code points are wide too (EastAsianWidth.txt, its header): a
# character added there later shows wide in terminals that know it.
WIDE_BLOCKS = [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FFFD),
               (0x30000, 0x3FFFD)]


def zero_width(cp):
    if 0x1160 <= cp <= 0x11FF:  # Hangul Jungseong and Jongseong: joined to the syllable before
        return True
    if cp == 0x00AD:  # SOFT HYPHEN: terminals show it (as wcwidth counts it: 1)
        return False
    return unicodedata.category(chr(cp)) in ("Mn", "Me", "Cf")


def wide(cp):
    if any(lo <= cp <= hi for lo, hi in WIDE_BLOCKS):
        return True
    return unicodedata.east_asian_width(chr(cp)) in ("W", "F")


def ranges(predicate):
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or not predicate(cp):
            continue
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def emit(name, table):
    print(f"// {len(table)} ranges.")
    print(f"constexpr CodePointRange {name}[] = {{")
    line = "   "
    for lo, hi in table:
        item = f" {{0x{lo:04X}, 0x{hi:04X}}},"
        if len(line) + len(item) > 100:
            print(line)
            line = "   "
        line += item
    print(line)
    print("};")


print(f"// Unicode {unicodedata.unidata_version}")
emit("kZeroWidth", ranges(zero_width))
emit("kWide", ranges(lambda cp: wide(cp) and not zero_width(cp)))
