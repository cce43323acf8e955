# Sourced by the measurement scripts under docs/design/ (run as root: the server runs as
# `postgres`). start_throwaway_pg [MAX_CONNECTIONS] starts Debian's newest installed PostgreSQL
# in a temporary directory (initdb defaults, fsync on, a free loopback port), sets pg_bin,
# pg_dir, port and pg (its URI), and stops and removes it when the script exits. A script with
# more to remove on exit defines cleanup_more first.
start_throwaway_pg() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  pg_dir=$(mktemp -d /tmp/throwaway-pg.XXXXXX)
  chown postgres: "$pg_dir"
  chmod 700 "$pg_dir"
  trap 'runuser -u postgres -- "$pg_bin/pg_ctl" stop --pgdata="$pg_dir/data" --mode=fast --silent || true
        rm -rf "$pg_dir"
        if declare -F cleanup_more >/dev/null; then cleanup_more; fi' EXIT
  runuser -u postgres -- "$pg_bin/initdb" --pgdata="$pg_dir/data" --username=postgres --auth=trust \
    --encoding=UTF8 --locale=C --no-instructions >/dev/null
  runuser -u postgres -- mkdir "$pg_dir/socket"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  runuser -u postgres -- "$pg_bin/pg_ctl" start --pgdata="$pg_dir/data" --log="$pg_dir/server.log" \
    --wait --silent -o "-c listen_addresses=127.0.0.1 -c port=$port \
    -c unix_socket_directories=$pg_dir/socket -c fsync=on -c max_connections=${1:-200}"
  pg="postgresql://postgres@127.0.0.1:$port/postgres"
}
