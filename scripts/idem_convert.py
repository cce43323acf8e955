#!/usr/bin/env python3
"""Converts the rows of an older idempotency design into idem's export format (JSON Lines,
docs/format.md, "Export format"), for `idem import`. docs/moving_to_idem.md walks through it.

  mysql-dedup: the classic dedup table (biz_key, status 0/1/2, result, create_time,
               timeout_time), as `mysql --batch --skip-column-names` prints it (tab-separated,
               NULL as NULL, tab, newline, NUL and backslash escaped as \\t \\n \\0 \\\\):

    mysql -B -N -e "SELECT biz_key, status, result, create_time, timeout_time FROM dedup" app \\
      | python3 scripts/idem_convert.py mysql-dedup --type pay > dedup.jsonl

  redis-lock:  keys of a `SET key token NX PX ttl` lock design, one "KEY<TAB>VALUE<TAB>PTTL" line
               each (PTTL in milliseconds, -1 for none), as the loop in docs/moving_to_idem.md
               prints them. A key is a claim in flight: a pending record whose lease ends when the
               lock would have. With --done-prefix P, a value starting with P is a stored result
               instead (a done record; the rest of the value is the result).

Status 0 (pending/processing) becomes "pending" with its lease ending at timeout_time; 1 (done)
"done" with its result; 2 (failed) "failed", retryable, with the result column as the error text
(--failed-terminal makes failures final). No token is written: idem gives each record a fresh
one. MySQL times are read in --utc-offset (the session time zone they were written in; default
+00:00). Every record is kept --retention-days (default 30, idem's default) after create_time,
and never less than its lease.
Bad input stops the conversion with its line number (exit 1). Python 3.7+, no other module.
"""

import argparse
import datetime
import json
import re
import sys

UTC = datetime.timezone.utc


def fail(number, why):
    sys.stderr.write(f"idem_convert: line {number}: {why}\n")
    sys.exit(1)


def unescape_mysql(field):
    """The bytes of one `mysql --batch` field (None for NULL)."""
    if field == b"NULL":
        return None
    escapes = {b"n": b"\n", b"t": b"\t", b"0": b"\0", b"\\": b"\\", b"b": b"\b", b"r": b"\r"}
    return re.sub(rb"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), field)


def json_bytes(raw):
    """A byte string in the export format: text when it is UTF-8, {"hex": ...} otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": raw.hex()}


def rfc3339(moment):
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_offset(text):
    match = re.fullmatch(r"([+-])(\d\d):(\d\d)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"'{text}' is not an offset such as +08:00")
    minutes = int(match.group(2)) * 60 + int(match.group(3))
    return datetime.timezone(datetime.timedelta(minutes=-minutes if match.group(1) == "-" else minutes))


def mysql_time(raw, zone, number, column):
    text = (raw or b"").decode("ascii", "replace")
    for layout in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.datetime.strptime(text, layout).replace(tzinfo=zone)
        except ValueError:
            pass
    fail(number, f"{column} '{text}' is not a MySQL DATETIME (YYYY-MM-DD HH:MM:SS[.ffffff])")


def mysql_dedup(args, lines):
    for number, line in lines:
        fields = line.split(b"\t")
        if len(fields) != 5:
            fail(number, f"{len(fields)} columns; expected 5 (biz_key, status, result, create_time, timeout_time)")
        key, status, result, created, timeout = (unescape_mysql(f) for f in fields)
        if not key:
            fail(number, "biz_key is empty or NULL")
        created = mysql_time(created, args.utc_offset, number, "create_time")
        expires = created + datetime.timedelta(days=args.retention_days)
        record = {"key": json_bytes(key), "type": args.type}
        if status == b"0":
            record["state"] = "pending"
            if timeout is None:
                fail(number, "a pending row (status 0) needs its timeout_time")
            lease_deadline = mysql_time(timeout, args.utc_offset, number, "timeout_time")
            record["lease_deadline"] = rfc3339(lease_deadline)
            expires = max(expires, lease_deadline)  # as idem keeps it: never before the lease
        elif status == b"1":
            record["state"] = "done"
            record["result"] = json_bytes(result or b"")
        elif status == b"2":
            record["state"] = "failed"
            record["result"] = json_bytes(result or b"")
            record["retryable"] = not args.failed_terminal
        else:
            fail(number, f"status {status!r} is not 0, 1 or 2")
        record["created"] = rfc3339(created)
        record["updated"] = record["created"]
        record["expires"] = rfc3339(expires)
        yield record


def redis_lock(args, lines):
    now = datetime.datetime.now(UTC)
    for number, line in lines:
        fields = line.split(b"\t")
        if len(fields) != 3:
            fail(number, f"{len(fields)} columns; expected 3 (key, value, pttl)")
        key, value, pttl = fields
        if args.prefix:
            if not key.startswith(args.prefix.encode()):
                fail(number, f"key {key!r} does not start with --prefix {args.prefix!r}")
            key = key[len(args.prefix):]
        if not key:
            fail(number, "empty key")
        try:
            ttl = int(pttl)
        except ValueError:
            fail(number, f"PTTL {pttl!r} is not a number of milliseconds")
        if ttl == -2:
            continue  # expired between the scan and PTTL: nothing to import
        ends = now + datetime.timedelta(milliseconds=max(ttl, 0))
        record = {"key": json_bytes(key), "type": args.type, "created": rfc3339(now),
                  "updated": rfc3339(now)}
        done_prefix = args.done_prefix.encode() if args.done_prefix else None
        if done_prefix is not None and value.startswith(done_prefix):
            record["state"] = "done"
            record["result"] = json_bytes(value[len(done_prefix):])
            retention = ends if ttl >= 0 else now + datetime.timedelta(days=args.retention_days)
            record["expires"] = rfc3339(retention)
        else:
            # A lock without a TTL would never end: its lease ends now, so the next Begin takes
            # the key over.
            record["state"] = "pending"
            record["lease_deadline"] = rfc3339(ends)
            record["expires"] = rfc3339(max(ends, now + datetime.timedelta(days=args.retention_days)))
        yield record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="source", required=True)
    mysql = sub.add_parser("mysql-dedup", help="rows of the MySQL dedup table")
    mysql.add_argument("--utc-offset", type=parse_offset, default=UTC,
                       help="time zone of create_time and timeout_time (default +00:00)")
    mysql.add_argument("--failed-terminal", action="store_true",
                       help="status 2 is final: later requests get the failure, not a new run")
    redis = sub.add_parser("redis-lock", help="keys of a SET NX PX lock design")
    redis.add_argument("--prefix", default="", help="strip this prefix from every key")
    redis.add_argument("--done-prefix", default="",
                       help="values starting with it are stored results, not locks")
    for each in (mysql, redis):
        each.add_argument("--type", default="", help="the type label of every record")
        each.add_argument("--retention-days", type=float, default=30.0,
                          help="how long a record is kept after it was created (default 30)")
    args = parser.parse_args()

    lines = ((number, line.rstrip(b"\r"))
             for number, line in enumerate(sys.stdin.buffer.read().split(b"\n"), start=1)
             if line.rstrip(b"\r"))
    convert = mysql_dedup if args.source == "mysql-dedup" else redis_lock
    for record in convert(args, lines):
        sys.stdout.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
