#!/usr/bin/env bash
# Builds the static binaries and the FROM scratch images tether:dev and
# tether-demo-backend:dev (nothing is pulled), and creates the Compose demo's
# secrets in deploy/secrets/ when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
make build
CGO_ENABLED=0 ${GO:-go} build -trimpath -ldflags '-s -w' -o bin/demo-backend ./deploy/demo-backend
docker build -q -f deploy/Dockerfile -t "${IMAGE:-tether:dev}" .
docker build -q -f deploy/Dockerfile.backend -t "${BACKEND_IMAGE:-tether-demo-backend:dev}" .
mkdir -p deploy/secrets
for f in cluster-secret admin-token; do
  if [ ! -s "deploy/secrets/$f" ]; then
    # 32 random bytes, hex. Readable by the containers' user (65534): the
    # files are bind-mounted as they are (Compose without swarm).
    (umask 022; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "deploy/secrets/$f")
    echo "created deploy/secrets/$f"
  fi
done
