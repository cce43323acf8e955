#!/usr/bin/env bash
# Drives examples/http_service with real curl processes and checks the Idempotency-Key rules:
# status codes, replays (same status and body, "Idempotent-Replayed: true"), per-client scoping,
# retries with `curl --retry`, and the ledger: exactly one effect per (client, key) however many
# requests were sent. Starts the server on a free loopback port and stops it on exit.
#
#   test.sh PATH_TO_http_service
#
# Exit 0 when every check passes, 1 otherwise.
set -euo pipefail

server_bin=${1:?usage: test.sh PATH_TO_http_service}
command -v curl >/dev/null || { echo "test.sh: curl is not installed" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/idem-http-test.XXXXXX")
server_pid=
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

failures=0
checks=0
# check DESCRIPTION COMMAND...: runs the command as a condition and reports it.
check() {
  local what=$1
  shift
  checks=$((checks + 1))
  if "$@"; then
    echo "  ok    $what"
  else
    echo "  FAIL  $what"
    failures=$((failures + 1))
  fi
}

# ---- Start the server -------------------------------------------------------------------------
# 500 ms per payment, so that parallel duplicates overlap the first request. The log is made
# first: the background job opens its redirection only once it runs, which may be after the
# loop below first reads the file (seen: "sed: can't read .../server.log" at once).
: >"$work/server.log"
"$server_bin" "$work/store" --port 0 --work-ms 500 --faults >>"$work/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's|^http_service: listening on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' \
    "$work/server.log")
  [[ -n $port ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "test.sh: the server exited at start:" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "test.sh: the server did not start listening within 10 s" >&2
  exit 1
fi
base=http://127.0.0.1:$port
echo "server: pid $server_pid on $base"

# ---- Helpers ----------------------------------------------------------------------------------
# post NAME CLIENT_HEADER KEY BODY [CURL ARGS...]: POST /payments. KEY "" sends no
# Idempotency-Key. Leaves $work/NAME.code (the final status), NAME.headers, NAME.body.
post() {
  local name=$1 client=$2 key=$3 body=$4
  shift 4
  local args=(-sS -X POST "$base/payments" -H "Content-Type: application/json" -d "$body"
    -o "$work/$name.body" -D "$work/$name.headers" -w '%{http_code}' --max-time 20)
  [[ -n $client ]] && args+=(-H "$client")
  [[ -n $key ]] && args+=(-H "Idempotency-Key: \"$key\"")
  curl "${args[@]}" "$@" >"$work/$name.code" 2>"$work/$name.stderr" || true
}
code() { cat "$work/$1.code"; }
body() { cat "$work/$1.body"; }
# header NAME FIELD: FIELD's value in the last response curl received for NAME (after retries).
header() {
  awk -v field="$(tr '[:upper:]' '[:lower:]' <<<"$2")" '
    /^HTTP\// { value = "" }
    { line = $0; sub(/\r$/, "", line); split(line, parts, ":") }
    tolower(parts[1]) == field { value = substr(line, length(parts[1]) + 2); sub(/^ +/, "", value) }
    END { print value }' "$work/$1.headers"
}
replayed() { [[ $(header "$1" Idempotent-Replayed) == true ]]; }
fresh() { [[ -z $(header "$1" Idempotent-Replayed) ]]; }
is() { [[ $1 == "$2" ]]; }
is_not() { [[ $1 != "$2" ]]; }
contains() { [[ $1 == *"$2"* ]]; }
ledger() { curl -sS --max-time 5 "$base/ledger"; }
# ledger_count CLIENT KEY: how many effects the ledger holds for the client's key.
ledger_count() { ledger | awk -F'\t' -v c="$1" -v k="$2" '$1 == c && $2 == k { n++ } END { print n + 0 }'; }

check "GET /healthz answers" is "$(curl -sS --max-time 5 "$base/healthz")" ok

# ---- 1. A missing Idempotency-Key -------------------------------------------------------------
echo "1. a request without Idempotency-Key"
post missing "X-Client-Id: alice" "" '{"amount": 1000, "currency": "EUR"}'
check "400" is "$(code missing)" 400
check "with a problem+json body" is "$(header missing Content-Type)" application/problem+json
check "titled 'Idempotency-Key is missing'" contains "$(body missing)" "Idempotency-Key is missing"
post anonymous "" "k-anon" '{"amount": 1000, "currency": "EUR"}'
check "a request from no identifiable client: 401" is "$(code anonymous)" 401

# ---- 2. Eight identical requests at once ------------------------------------------------------
echo "2. eight parallel curl processes send the same key and body (a double-clicked button)"
pids=()
for i in $(seq 8); do
  post "par$i" "X-Client-Id: alice" order-1 '{"amount": 2500, "currency": "EUR"}' &
  pids+=($!)
done
wait "${pids[@]}"  # not a bare `wait`: that would wait for the server too
created=0 conflicts=0 replays=0 other=0 first=
for i in $(seq 8); do
  case "$(code "par$i")" in
    201) if fresh "par$i"; then created=$((created + 1)); first=par$i; else replays=$((replays + 1)); fi ;;
    409) conflicts=$((conflicts + 1)) ;;
    *) other=$((other + 1)) ;;
  esac
done
echo "     answers: $created created, $conflicts conflicts (409), $replays replays, $other other"
check "exactly one 201 that is not a replay" is "$created" 1
check "the others get 409 or a replay" is "$((conflicts + replays))" 7
check "at least one duplicate overlapped the first and got 409" test "$conflicts" -ge 1
for i in $(seq 8); do
  if [[ $(code "par$i") == 409 ]]; then
    check "par$i's 409 carries Retry-After" test -n "$(header "par$i" Retry-After)"
    break
  fi
done
for i in $(seq 8); do
  if [[ $(code "par$i") == 201 && -n $first ]]; then
    check "par$i's 201 has the first response's body" is "$(body "par$i")" "$(body "$first")"
  fi
done

# ---- 3. A replay ------------------------------------------------------------------------------
echo "3. the same request again, after the first completed"
post replay "X-Client-Id: alice" order-1 '{"amount": 2500, "currency": "EUR"}'
check "201" is "$(code replay)" 201
check "with Idempotent-Replayed: true" replayed replay
check "and the first response's body" is "$(body replay)" "$(body "${first:-par1}")"

# ---- 4. The same key with a different payload -------------------------------------------------
echo "4. the same key with a different amount"
post reuse "X-Client-Id: alice" order-1 '{"amount": 9999, "currency": "EUR"}'
check "422" is "$(code reuse)" 422
check "titled 'Idempotency-Key is already used'" contains "$(body reuse)" \
  "Idempotency-Key is already used"

# ---- 5. A lost reply, retried by curl --retry -------------------------------------------------
echo "5. the reply is lost (the server answers 503 after paying); curl --retry resends"
post lost "X-Client-Id: carol" order-2 '{"amount": 4200, "currency": "USD"}' \
  -H "X-Fault: lose-reply" --retry 3 --retry-delay 1
check "curl ends with 201" is "$(code lost)" 201
check "which is the replay of the completed payment" replayed lost
check "the server answered 503 once" is \
  "$(grep -c 'client:carol key=order-2 -> 503' "$work/server.log")" 1
check "the payment ran once" is "$(ledger_count client:carol order-2)" 1

# ---- 6. Many keys, each sent by three curl processes that retry their 409s ---------------------
echo "6. six keys, three parallel curl processes each, retrying their 409s (--fail --retry-all-errors)"
pids=()
for k in $(seq 6); do
  for r in $(seq 3); do
    post "storm$k-$r" "X-Client-Id: dave" "storm-$k" "{\"amount\": $((100 * k)), \"currency\": \"EUR\"}" \
      --fail --retry 5 --retry-all-errors --retry-delay 1 &
    pids+=($!)
  done
done
wait "${pids[@]}"
storm_ok=true
for k in $(seq 6); do
  fresh_count=0
  for r in $(seq 3); do
    [[ $(code "storm$k-$r") == 201 ]] || storm_ok=false
    fresh "storm$k-$r" && fresh_count=$((fresh_count + 1))
    [[ $(body "storm$k-$r") == "$(body "storm$k-1")" ]] || storm_ok=false
  done
  [[ $fresh_count == 1 ]] || storm_ok=false
  [[ $(ledger_count client:dave "storm-$k") == 1 ]] || storm_ok=false
done
check "every process ends with 201, one per key fresh, the same body, one effect per key" \
  "$storm_ok"

# ---- 7. Two clients, one key ------------------------------------------------------------------
echo "7. alice, bob and a client with a bearer token use the same Idempotency-Key"
post shared-alice "X-Client-Id: alice" shared-key '{"amount": 111, "currency": "EUR"}'
post shared-bob "X-Client-Id: bob" shared-key '{"amount": 222, "currency": "EUR"}'
post shared-erin "Authorization: Bearer erin-secret-token" shared-key '{"amount": 333, "currency": "EUR"}'
check "alice: 201, not a replay" fresh shared-alice
check "bob: 201, not a replay (no 422: his key is not alice's)" fresh shared-bob
check "erin: 201, not a replay" fresh shared-erin
check "all three 201" is "$(code shared-alice)$(code shared-bob)$(code shared-erin)" 201201201
check "bob's payment is not alice's" is_not "$(body shared-bob)" "$(body shared-alice)"
post shared-bob-again "X-Client-Id: bob" shared-key '{"amount": 222, "currency": "EUR"}'
check "bob's retry replays bob's response" is "$(body shared-bob-again)" "$(body shared-bob)"
check "  (marked Idempotent-Replayed)" replayed shared-bob-again
post shared-alice-again "X-Client-Id: alice" shared-key '{"amount": 111, "currency": "EUR"}'
check "alice's retry replays alice's response" is "$(body shared-alice-again)" \
  "$(body shared-alice)"
check "the bearer token is not stored: erin appears as a digest" \
  test "$(ledger | grep -c 'erin-secret-token')" -eq 0

# ---- 8. A declined payment is an answer too ---------------------------------------------------
echo "8. a declined payment (402) is stored and replayed like a success"
post declined "X-Client-Id: alice" big-1 '{"amount": 500000, "currency": "EUR"}'
post declined-again "X-Client-Id: alice" big-1 '{"amount": 500000, "currency": "EUR"}'
check "402" is "$(code declined)" 402
check "the retry: 402 again, replayed, same body" \
  test "$(code declined-again)" = 402 -a "$(body declined-again)" = "$(body declined)"
check "  (marked Idempotent-Replayed)" replayed declined-again
check "the decline ran once" is "$(ledger_count client:alice big-1)" 1

# ---- 9. Two Idempotency-Key headers ----------------------------------------------------------
echo "9. two Idempotency-Key header lines in one request (the field must hold one key)"
post twokeys "X-Client-Id: alice" twice-1 '{"amount": 1000, "currency": "EUR"}' \
  -H 'Idempotency-Key: "twice-2"'
check "400" is "$(code twokeys)" 400
check "titled 'Idempotency-Key is sent more than once'" contains "$(body twokeys)" \
  "Idempotency-Key is sent more than once"
check "saying how many were sent" contains "$(body twokeys)" "2 Idempotency-Key header lines"
post twosame "X-Client-Id: alice" twice-1 '{"amount": 1000, "currency": "EUR"}' \
  -H 'Idempotency-Key: "twice-1"'
check "the same key twice: 400 too" is "$(code twosame)" 400
check "no payment ran for either key" is \
  "$(ledger_count client:alice twice-1)$(ledger_count client:alice twice-2)" 00

# ---- The ledger -------------------------------------------------------------------------------
echo "the ledger (one line per payment that ran):"
ledger | sed 's/^/     /'
requests=$(grep -c '^POST /payments' "$work/server.log")
effects=$(ledger | wc -l)
duplicates=$(ledger | cut -f1,2 | sort | uniq -d | wc -l)
# order-1 and big-1 (alice), order-2 (carol), six storm keys (dave), shared-key x3.
check "no (client, key) has two effects" is "$duplicates" 0
check "12 effects, one per (client, key) used" is "$effects" 12
echo "     $requests requests reached the server; $effects payments ran"

# ---- Metrics ----------------------------------------------------------------------------------
metrics=$(curl -sS --max-time 5 "$base/metrics")
metric() { awk -v m="$1" '$1 == m { print $2 }' <<<"$metrics"; }
check "/metrics: every counter, typed" test "$(grep -c '^# TYPE idem_.*_total counter$' <<<"$metrics")" -ge 8
# One claim per (client, key) that ran, plus the faults' retries; replays for the duplicates.
check "/metrics: a claim per payment that ran" test "$(metric idem_claims_total)" -ge "$effects"
check "/metrics: the duplicates were replays or waits" \
  test $(($(metric idem_replays_total) + $(metric idem_in_progress_total))) -gt 0

# ---- Stop -------------------------------------------------------------------------------------
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=
check "the server stops cleanly on SIGTERM" is "$server_status" 0

if ((failures > 0)); then
  echo "FAILED: $failures of $checks checks; the server's log:"
  sed 's/^/  /' "$work/server.log"
  exit 1
fi
echo "OK: all $checks checks passed ($requests requests, $effects effects, one per client and key)"
