#!/usr/bin/env bash
# Runs the PostgreSQL benchmarks: engine vs pgbench hold throughput (hot slot and 1,000 spread
# slots, 8 connections each) and availability vs a bare scan, and prints the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
command -v pgbench >/dev/null || { echo "pgbench is not installed (Debian: postgresql-client)"; exit 1; }
cargo bench --bench postgres "$@"
