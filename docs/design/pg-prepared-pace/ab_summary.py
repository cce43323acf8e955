#!/usr/bin/env python3
# Medians per side (A, B) of each (workload, system, threads) in ab.sh's OUTDIR, and of idem's
# ratio to the anchor of the same run (ANCHOR_LIFE for lifecycle and effects, ANCHOR_REPLAY; raw
# RocksDB for the RocksDB systems of docs/design/stats-ab/ab.sh).
import glob, os, statistics, sys
from collections import defaultdict
life = os.environ.get("ANCHOR_LIFE", "pg-sql-prepared")
anchor = {("lifecycle", "idem-pg"): life, ("effects", "idem-pg"): life,
          ("replay", "idem-pg"): os.environ.get("ANCHOR_REPLAY", "pg-sql-read-first-prepared"),
          # docs/design/stats-ab/ab.sh: RocksDB's workloads, against raw RocksDB.
          ("lifecycle", "idem-buffered"): "rocksdb", ("lifecycle", "idem-sync"): "rocksdb-sync",
          ("replay", "idem-buffered"): "rocksdb"}
ops = defaultdict(list); ratios = defaultdict(list)
for path in sorted(glob.glob(sys.argv[1] + "/*.tsv")):
    side = os.path.basename(path).split("-")[1][0]
    rows = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4 or f[2] == "figure": continue
        rows[(f[0], f[1], int(f[2]))] = float(f[3])
    for (w, s, t), v in rows.items():
        ops[(w, s, t, side)].append(v)
        a = anchor.get((w, s))
        if a and (w, a, t) in rows: ratios[(w, s, t, side)].append(v / rows[(w, a, t)])
print(f"{'workload':10} {'system':27} {'thr':>3} | {'A ops':>8} {'B ops':>8} {'B/A':>5} | {'A ratio':>7} {'B ratio':>7}")
for w, s, t in sorted({k[:3] for k in ops}):
    a, b = ops.get((w, s, t, "A"), []), ops.get((w, s, t, "B"), [])
    if not a or not b: continue
    ra, rb = ratios.get((w, s, t, "A")), ratios.get((w, s, t, "B"))
    rtxt = f"{statistics.median(ra):7.2f} {statistics.median(rb):7.2f}" if ra and rb else ""
    print(f"{w:10} {s:27} {t:3} | {statistics.median(a):8.0f} {statistics.median(b):8.0f} "
          f"{statistics.median(b) / statistics.median(a):5.2f} | {rtxt}")
