#!/usr/bin/env bash
# The example server over HTTP, side by side with baselines in the same run:
#
#   benches/http.sh                 # both parts
#   benches/http.sh availability    # part 1 only (needs wrk, curl)
#   benches/http.sh holds           # part 2 only (needs wrk, curl, psql, pgbench, PostgreSQL)
#
# 1. Cached availability: the release example server on its embedded SQLite default (demo
#    slots, a cache period of a year, so every request is a cache hit) against
#    `http_baseline` (examples/server/examples), a bare axum server answering with the very
#    bytes and headers the server answered (fetched with curl first, and compared after).
#    `wrk` with 32 connections, ROUNDS rounds of RUN_SECONDS each, alternating which goes first;
#    req/s of both per round, and the ratio of the totals.
# 2. Holds on PostgreSQL: the server on a fresh database (HTTP_BENCH_DATABASE, dropped and
#    created on DATABASE_URL's server), slots of the largest capacity made through the admin
#    API, `wrk` with 8 connections POSTing /slots/{id}/hold with a unique Idempotency-Key each,
#    against `pgbench` with 8 clients running benches/pgbench/hold.sql (the store's hold
#    statement) on the same tables; for one hot slot and for 1,000 slots, alternating in
#    HOLD_ROUNDS rounds of RUN_SECONDS.
#
# Settings (environment): ROUNDS (5), HOLD_ROUNDS (2), RUN_SECONDS (10), WRK_THREADS (2),
# DATABASE_URL (postgres://postgres@127.0.0.1:5432/postgres; no query string),
# HTTP_BENCH_DATABASE (sb_http_bench), SERVER_PORT (38080), BASELINE_PORT (38081); the
# server's own settings pass through (REQUEST_LOG=0 times it without its per-request log line);
# SERVER_BIN times another build of the server (a copy of an earlier one, say).
# Every process it starts is stopped on exit, and its temporary directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."

PART="${1:-all}"
case "$PART" in
    all | availability | holds) ;;
    *) echo "usage: $0 [all|availability|holds]" >&2; exit 2 ;;
esac
ROUNDS="${ROUNDS:-5}"
HOLD_ROUNDS="${HOLD_ROUNDS:-2}"
SECONDS_PER_RUN="${RUN_SECONDS:-10}"
WRK_THREADS="${WRK_THREADS:-2}"
SERVER_PORT="${SERVER_PORT:-38080}"
BASELINE_PORT="${BASELINE_PORT:-38081}"
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
BENCH_DB="${HTTP_BENCH_DATABASE:-sb_http_bench}"
ADMIN_TOKEN="http-bench-admin-token-0123456789"

need() {
    command -v "$1" >/dev/null || { echo "error: $1 is not installed ($2)" >&2; exit 1; }
}
need curl "Debian: apt-get install -y curl"
need wrk "Debian: apt-get install -y wrk"
need awk "Debian: apt-get install -y gawk"
if [ "$PART" != availability ]; then
    need psql "Debian: apt-get install -y postgresql-client"
    need pgbench "Debian: apt-get install -y postgresql-client"
    psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null ||
        { echo "error: cannot reach PostgreSQL at DATABASE_URL=$DATABASE_URL" >&2; exit 1; }
fi

WORK="$(mktemp -d -t sb_http_bench.XXXXXX)"
PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "building the release example server and the baseline..."
cargo build --release --example server --quiet
cargo build --release -p slot_booking_server --example http_baseline --quiet
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps | sed 's/.*"target_directory":"\([^"]*\)".*/\1/')"
SERVER_BIN="${SERVER_BIN:-$TARGET_DIR/release/examples/server}"
BASELINE_BIN="$TARGET_DIR/release/examples/http_baseline"

# wait_for URL PID: until URL answers, or fail if PID died or 30 s passed.
wait_for() {
    local tries=0
    until curl -s -o /dev/null "$1"; do
        kill -0 "$2" 2>/dev/null || { echo "error: the process serving $1 exited; see its log:" >&2; tail -5 "$WORK"/*.log >&2; exit 1; }
        tries=$((tries + 1))
        [ "$tries" -lt 300 ] || { echo "error: $1 did not answer within 30 s" >&2; exit 1; }
        sleep 0.1
    done
}

# start_server LOG VAR=VALUE...: starts the example server in the background with the given
# environment on SERVER_PORT, and waits until it answers.
start_server() {
    local log="$1"
    shift
    env BIND="127.0.0.1:$SERVER_PORT" "$@" "$SERVER_BIN" >"$log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_for "http://127.0.0.1:$SERVER_PORT/slots/availability" "$SERVER_PID"
}

stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
}

# run_wrk CONNECTIONS URL [SCRIPT]: prints requests per second; fails on errors or non-2xx.
run_wrk() {
    local out
    out="$(wrk -t"$WRK_THREADS" -c"$1" -d"${SECONDS_PER_RUN}s" ${3:+-s "$3"} "$2")"
    if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
        echo "error: wrk against $2 met errors:" >&2
        echo "$out" >&2
        exit 1
    fi
    awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}

# run_pgbench FIRST LAST: prints pgbench's tps for benches/pgbench/hold.sql, 8 clients.
run_pgbench() {
    local out
    out="$(pgbench -n -M prepared -c 8 -j 2 -T "$SECONDS_PER_RUN" -D "first=$1" -D "last=$2" \
        -f "$WORK/hold.sql" "$BENCH_URL" 2>&1)" ||
        { echo "error: pgbench failed:" >&2; echo "$out" >&2; exit 1; }
    awk '/^tps =/ { print $3 }' <<<"$out"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

availability() {
    echo
    echo "== cached availability: server (SQLite, demo slots) vs a bare axum server, wrk -c32, $ROUNDS x ${SECONDS_PER_RUN}s"
    start_server "$WORK/server.log" DATABASE_URL="sqlite://$WORK/bench.db" \
        CACHE_PERIOD_SECONDS=31536000
    local url="http://127.0.0.1:$SERVER_PORT/slots/availability"
    curl -s -D "$WORK/headers.txt" -o "$WORK/body.json" "$url"
    BASELINE_BODY="$WORK/body.json" BASELINE_HEADERS="$WORK/headers.txt" \
        BIND="127.0.0.1:$BASELINE_PORT" "$BASELINE_BIN" >"$WORK/baseline.log" 2>&1 &
    local baseline_pid=$!
    PIDS+=("$baseline_pid")
    local base_url="http://127.0.0.1:$BASELINE_PORT/slots/availability"
    wait_for "$base_url" "$baseline_pid"
    # The same bytes, the same headers (but the date and max-age, which count down).
    local strip='tr -d "\r" | grep -viE "^(date|cache-control):" | sort'
    curl -s -D "$WORK/h1" -o "$WORK/b1" "$url"
    curl -s -D "$WORK/h2" -o "$WORK/b2" "$base_url"
    cmp -s "$WORK/b1" "$WORK/b2" || { echo "error: the baseline's body differs" >&2; exit 1; }
    diff <(eval "$strip" <"$WORK/h1") <(eval "$strip" <"$WORK/h2") >/dev/null ||
        { echo "error: the baseline's headers differ:" >&2; diff "$WORK/h1" "$WORK/h2" >&2; exit 1; }
    echo "response: $(wc -c <"$WORK/body.json") bytes, $(grep -o "\"slot_id\"" "$WORK/body.json" | wc -l) slots; headers:"
    tr -d '\r' <"$WORK/headers.txt" | grep -v '^$' | sed 's/^/    /'
    local total_server=0 total_base=0 s b round
    for round in $(seq 1 "$ROUNDS"); do
        if [ $((round % 2)) -eq 1 ]; then
            s="$(run_wrk 32 "$url")"
            b="$(run_wrk 32 "$base_url")"
        else
            b="$(run_wrk 32 "$base_url")"
            s="$(run_wrk 32 "$url")"
        fi
        total_server="$(awk -v t="$total_server" -v x="$s" 'BEGIN { print t + x }')"
        total_base="$(awk -v t="$total_base" -v x="$b" 'BEGIN { print t + x }')"
        printf 'round %d: server %10.0f req/s   baseline %10.0f req/s   ratio %sx\n' \
            "$round" "$s" "$b" "$(ratio "$s" "$b")"
    done
    printf 'cached availability, 32 connections: server %.0f req/s, baseline %.0f req/s, ratio %sx (target >= 0.8x)\n' \
        "$(awk -v t="$total_server" -v n="$ROUNDS" 'BEGIN { print t / n }')" \
        "$(awk -v t="$total_base" -v n="$ROUNDS" 'BEGIN { print t / n }')" \
        "$(ratio "$total_server" "$total_base")"
    stop_server
    kill "$baseline_pid" 2>/dev/null || true
    wait "$baseline_pid" 2>/dev/null || true
}

holds() {
    echo
    echo "== holds on PostgreSQL: server (HTTP, wrk -c8) vs pgbench -c8 (benches/pgbench/hold.sql), $HOLD_ROUNDS x ${SECONDS_PER_RUN}s"
    BENCH_URL="${DATABASE_URL%/*}/$BENCH_DB"
    export PGOPTIONS='-c client_min_messages=warning'
    psql "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 \
        -c "DROP DATABASE IF EXISTS $BENCH_DB WITH (FORCE)" -c "CREATE DATABASE $BENCH_DB" >/dev/null
    start_server "$WORK/holds.log" DATABASE_URL="$BENCH_URL" DEMO_SLOTS=0 ADMIN_TOKEN="$ADMIN_TOKEN"
    sed 's/{schema}/slot_booking/g' benches/pgbench/hold.sql >"$WORK/hold.sql"
    # One hot slot, then 1,000 more: consecutive ids (a fresh database), one minute apart.
    local base ids=() i
    base="$(date -u -d 'tomorrow 00:00' +%s)"
    for i in $(seq 0 1000); do
        ids+=("$(curl -sf -X POST "http://127.0.0.1:$SERVER_PORT/admin/slots" \
            -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
            -d "{\"starts_at\":\"$(date -u -d "@$((base + 60 * i))" +%FT%TZ)\",\"ends_at\":\"$(date -u -d "@$((base + 60 * i + 3600))" +%FT%TZ)\",\"capacity\":2147483647}" |
            sed 's/.*"slot_id":\([0-9]*\).*/\1/')")
    done
    [ "$((ids[1000] - ids[1]))" -eq 999 ] || { echo "error: the 1,000 slots' ids are not consecutive" >&2; exit 1; }
    cat >"$WORK/hold.lua" <<'LUA'
-- POST /slots/{id}/hold, id random in [FIRST, LAST], a unique Idempotency-Key per request.
local first, last = tonumber(os.getenv("FIRST")), tonumber(os.getenv("LAST"))
local tag = os.getenv("TAG")
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("id", threads)
end
local n = 0
function request()
    n = n + 1
    local slot = math.random(first, last)
    return wrk.format("POST", "/slots/" .. slot .. "/hold",
        { ["Idempotency-Key"] = tag .. "-" .. id .. "-" .. n }, nil)
end
LUA
    local url="http://127.0.0.1:$SERVER_PORT/"
    local name first last round s p total_s total_p
    for name in "hot slot" "1,000 slots"; do
        if [ "$name" = "hot slot" ]; then first="${ids[0]}" last="${ids[0]}"; else first="${ids[1]}" last="${ids[1000]}"; fi
        total_s=0 total_p=0
        for round in $(seq 1 "$HOLD_ROUNDS"); do
            export FIRST="$first" LAST="$last" TAG="r$round-${first}-$last"
            if [ $((round % 2)) -eq 1 ]; then
                s="$(run_wrk 8 "$url" "$WORK/hold.lua")"
                p="$(run_pgbench "$first" "$last")"
            else
                p="$(run_pgbench "$first" "$last")"
                s="$(run_wrk 8 "$url" "$WORK/hold.lua")"
            fi
            total_s="$(awk -v t="$total_s" -v x="$s" 'BEGIN { print t + x }')"
            total_p="$(awk -v t="$total_p" -v x="$p" 'BEGIN { print t + x }')"
            printf '%s, round %d: server %8.0f holds/s   pgbench %8.0f holds/s   ratio %sx\n' \
                "$name" "$round" "$s" "$p" "$(ratio "$s" "$p")"
        done
        printf 'postgres holds over HTTP, 8 connections, %s: server %.0f/s, pgbench %.0f/s, ratio %sx (target >= 0.7x)\n' \
            "$name" "$(awk -v t="$total_s" -v n="$HOLD_ROUNDS" 'BEGIN { print t / n }')" \
            "$(awk -v t="$total_p" -v n="$HOLD_ROUNDS" 'BEGIN { print t / n }')" \
            "$(ratio "$total_s" "$total_p")"
    done
    local broken
    broken="$(psql "$BENCH_URL" -AtqX -c "SELECT count(*) FROM slot_booking.slots s WHERE s.remaining + \
        (SELECT coalesce(sum(h.quantity), 0) FROM slot_booking.holds h WHERE h.slot_id = s.id \
         AND h.status IN ('held', 'confirmed')) <> s.capacity")"
    [ "$broken" = 0 ] || { echo "error: $broken slots broke the capacity invariant" >&2; exit 1; }
    stop_server
    psql "$DATABASE_URL" -qX -c "DROP DATABASE IF EXISTS $BENCH_DB WITH (FORCE)" >/dev/null
}

case "$PART" in
    availability) availability ;;
    holds) holds ;;
    all) availability; holds ;;
esac
