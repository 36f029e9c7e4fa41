#!/usr/bin/env bash
# Builds the static binary and the FROM scratch image tether:dev.
set -euo pipefail
cd "$(dirname "$0")/.."
make build
docker build -f deploy/Dockerfile -t "${IMAGE:-tether:dev}" .
