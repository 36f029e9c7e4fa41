#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a short, bounded time each.
# FUZZTIME (default 3s) sets the time per target. Seed corpora already run in
# plain `go test`; this adds a little coverage-guided exploration.
set -euo pipefail
fuzztime=${FUZZTIME:-3s}
cd "$(dirname "$0")/.."
count=0
for pkg in $(go list ./...); do
  targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
  for t in $targets; do
    echo "fuzz $pkg $t ($fuzztime)"
    go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/tether-fuzz.log 2>&1 || { cat /tmp/tether-fuzz.log; exit 1; }
    count=$((count + 1))
  done
done
echo "fuzz: $count targets ran for $fuzztime each"
