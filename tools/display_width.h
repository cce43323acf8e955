// How many columns a terminal gives a code point, from a table built into the command: 2 for
// East Asian Wide and Fullwidth characters (CJK, Hangul syllables, fullwidth forms, most emoji),
// 0 for combining and enclosing marks and format characters (they join the character before),
// 1 for the rest. Not wcwidth(3): its answer depends on the locale the command runs in (in the C
// locale, which cron gives, it knows no character above ASCII), and the tables must come out the
// same wherever they are printed.

#ifndef IDEM_TOOLS_DISPLAY_WIDTH_H_
#define IDEM_TOOLS_DISPLAY_WIDTH_H_

namespace idem::cli {

// 0, 1 or 2 (see above). Control characters (C0, DEL, C1) count 0: the command never prints one
// raw (DisplayEscape writes them as escapes, which are ASCII).
int CodePointWidth(char32_t code_point);

}  // namespace idem::cli

#endif  // IDEM_TOOLS_DISPLAY_WIDTH_H_
