#!/usr/bin/env bash
# The bash completion (tools/idem.bash) against the built command: what it offers after each
# kind of word, as bash would ask it on TAB.
#   tests/completion_test.sh COMPLETION_SCRIPT IDEM_BINARY
set -euo pipefail
completion=$1
idem=$2

# shellcheck source=/dev/null
source "$completion"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/store-a" "$work/store-b"
: >"$work/records.jsonl"

failures=0
# complete WORD... : what _idem offers for the last word (the one being completed), sorted.
complete_words() {
  COMP_WORDS=("$idem" "$@")
  COMP_CWORD=$#
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_POINT=${#COMP_LINE}
  _idem
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() {
  local want=$1
  shift
  local got
  got=$(complete_words "$@")
  if [[ $got != "$want" ]]; then
    echo "FAIL: idem $* <TAB>: got '$got', want '$want'" >&2
    failures=$((failures + 1))
  fi
}
expect_has() {
  local want=$1
  shift
  local got
  got=" $(complete_words "$@") "
  if [[ $got != *" $want "* ]]; then
    echo "FAIL: idem $* <TAB>: '$want' not in '$got'" >&2
    failures=$((failures + 1))
  fi
}

# Every command `idem --help` lists, and only those (with --help and --version).
commands=$("$idem" --help | sed -n '/^Subcommands:/,/^$/{s/^  \([a-z][a-z]*\) .*/\1/p}' | sort |
  tr '\n' ' ' | sed 's/ $//')
[[ $commands == *purge* && $commands == *check* ]] || {
  echo "FAIL: no commands in idem --help" >&2
  exit 1
}
expect "--help --version $commands" ""
expect "purge" pu
expect "get" g

# A command's flags: every long flag its help lists.
for command in $commands; do
  flags=$("$idem" "$command" --help | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\n' ' ' |
    sed 's/ $//')
  expect "$(tr ' ' '\n' <<<"$flags" | sort | tr '\n' ' ' | sed 's/ $//')" "$command" "$work/store-a" --
done
expect_has "--keys-from" forget "$work/store-a" --k
expect_has "--verbose" ping "$work/store-a" --v
expect "--older-than" forget "$work/store-a" --o

# Flags of a fixed set offer it; flags of a value of their own offer nothing.
expect "done failed pending timeout" dump "$work/store-a" --state ""
expect "prometheus" stats "$work/store-a" --format p
expect "json text" purge "$work/store-a" --format ""
expect "" purge "$work/store-a" --timeout ""
expect "" dump "$work/store-a" --limit ""
# A flag without a value does not swallow the next word: paths again.
expect_has "$work/store-a" purge --dry-run "$work/store-"

# Paths: the store, a file to import, an output file.
expect "$work/store-a $work/store-b" dump "$work/store-"
expect "$work/records.jsonl" import "$work/store-a" "$work/rec"
expect "$work/records.jsonl" export "$work/store-a" --output "$work/rec"

if ((failures > 0)); then
  echo "$failures completion checks failed" >&2
  exit 1
fi
echo "completion: every command, flag, value set and path offered"
