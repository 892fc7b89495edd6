#!/usr/bin/env bash
# Issue 23 part 2, measured: the first-response time of NEWCOMERS new clients, one after
# another, while IDLE idle keep-alive connections are open, against the release example
# server on SQLite and on PostgreSQL (examples/server/examples/idle_flood.rs is the client).
#
#   examples/server/idle_flood.sh            # both stores
#   examples/server/idle_flood.sh sqlite     # one store
#
# Settings (environment): IDLE (2000), NEWCOMERS (50), REOPEN (0; 1 reopens every connection
# the server closes), DATABASE_URL (postgres://postgres@127.0.0.1:5432/postgres; a fresh
# database sb_idle_flood is made on its server), SERVER_PORT (38090), SERVER_BIN (another
# build of the server, an earlier one say; default: target/release/server, built here). The
# server's own settings pass through (MAX_CONNECTIONS, HEADER_TIMEOUT_SECONDS, ...).
# Raises the open-file limit to 65536 (or the hard limit) for both processes.
set -euo pipefail
cd "$(dirname "$0")/../.."

STORES="${1:-sqlite postgres}"
PORT="${SERVER_PORT:-38090}"
ADMIN_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 65536 ]; then ulimit -n 65536; else ulimit -n "$hard"; fi

cargo build --release -q -p slot_booking_server --bin server --example idle_flood
SERVER="${SERVER_BIN:-$TARGET_DIR/release/server}"
CLIENT="$TARGET_DIR/release/examples/idle_flood"
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

for store in $STORES; do
    case "$store" in
        sqlite) url="sqlite://$WORK/flood.db" ;;
        postgres)
            psql -q "$ADMIN_URL" -c 'DROP DATABASE IF EXISTS sb_idle_flood WITH (FORCE)' -c 'CREATE DATABASE sb_idle_flood'
            url="${ADMIN_URL%/*}/sb_idle_flood" ;;
        *) echo "unknown store $store (sqlite or postgres)" >&2; exit 2 ;;
    esac
    log="$WORK/server-$store.log"
    DATABASE_URL="$url" BIND="127.0.0.1:$PORT" REQUEST_LOG=0 "$SERVER" > "$log" 2>&1 &
    SERVER_PID=$!
    until grep -q 'serving on' "$log" 2>/dev/null; do
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; exit 1; }
        sleep 0.1
    done
    echo "== $store ($SERVER; $(grep -o 'max_connections=[0-9]*' "$log"))"
    TARGET="127.0.0.1:$PORT" "$CLIENT" | grep -v '^newcomer [0-9]*: [0-9.]* ms$'
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
    if [ "$store" = postgres ]; then
        psql -q "$ADMIN_URL" -c 'DROP DATABASE IF EXISTS sb_idle_flood WITH (FORCE)'
    fi
done
