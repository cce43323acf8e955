# bash completion for idem(1), installed as share/bash-completion/completions/idem.
#
# Everything it offers is read from the command's own help, so it cannot fall behind a release:
# the commands from `idem --help`, a command's flags from `idem COMMAND --help`, and the values
# of a flag that takes a fixed set (--state, --format) from its "TEXT:{a,b,c}" there. Arguments
# that name files (PATH, DEST, FILE, --output, --keys-from, --scratch) complete as paths.
# tests/completion_test.sh checks it against the built command.

_idem_help() {
  "${COMP_WORDS[0]}" "$@" --help 2>/dev/null
}

_idem() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local prev=""
  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
  COMPREPLY=()

  # The command: the first word after `idem` that is not a flag.
  local command="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ ${COMP_WORDS[i]} != -* ]]; then
      command=${COMP_WORDS[i]}
      break
    fi
  done
  if [[ -z $command ]]; then
    local commands
    commands=$(_idem_help | sed -n '/^Subcommands:/,/^$/{s/^  \([a-z][a-z]*\) .*/\1/p}')
    mapfile -t COMPREPLY < <(compgen -W "$commands --help --version" -- "$cur")
    return
  fi

  local help
  help=$(_idem_help "$command")
  # The value of the flag before: one of its fixed set, a path, or nothing to offer.
  if [[ $prev == --* ]]; then
    local line
    line=$(grep -m1 -o -- "$prev [A-Z]*:{[^}]*}" <<<"$help")
    if [[ -n $line ]]; then
      local values=${line#*\{}
      values=${values%\}}
      mapfile -t COMPREPLY < <(compgen -W "${values//,/ }" -- "$cur")
      return
    fi
    case $prev in
      --output | --keys-from | --scratch)
        compopt -o filenames 2>/dev/null || true
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return
        ;;
    esac
    if grep -q -- "^ *$prev \(TEXT\|INT\|UINT\|FLOAT\)" <<<"$help"; then
      return  # a flag that takes a value of its own (a duration, a number, a name)
    fi
  fi

  if [[ $cur == -* ]]; then
    local flags
    flags=$(grep -o -- '--[a-z][a-z-]*' <<<"$help" | sort -u)
    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")
    return
  fi
  # PATH (a store directory or a postgresql:// URI), DEST, FILE, KEY: paths.
  compopt -o filenames 2>/dev/null || true
  mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}

complete -F _idem idem
