/* IDEM_EXPORT marks the public API (C++ and C) as the symbols idem exports. The library is
 * compiled with hidden visibility, so everything else stays internal: a shared library or
 * program that links libidem.a exports none of idem's internals (nor RocksDB's helpers built
 * into it), and cannot clash with another copy of them. Written in C89 for idem/c.h. */

#ifndef IDEM_EXPORT_H_
#define IDEM_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define IDEM_EXPORT __attribute__((visibility("default")))
#else
#define IDEM_EXPORT
#endif

#endif /* IDEM_EXPORT_H_ */
