#!/usr/bin/env bash
# Removes what one run of the Docker end-to-end tests may leave behind
# when its process dies before its cleanup ran (go test's -timeout, a
# kill): every container, network and volume whose name starts with
# te2e-RUN (the tests' own containers, Compose projects and data volumes
# all do; RUN is the run's TETHER_E2E_RUN, so a concurrent run elsewhere
# is left alone). Prints what it removed; `make e2e-docker` runs it after
# the tests either way.
set -uo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 RUN (the TETHER_E2E_RUN the tests ran with)" >&2
  exit 2
fi
p="^te2e-$1"
left=0
ids=$(docker ps -aq --filter name=$p)
if [ -n "$ids" ]; then
  echo "e2e-docker cleanup: removing containers left behind: $(docker inspect -f '{{.Name}}' $ids | tr -d / | tr '\n' ' ')"
  docker rm -f -v $ids >/dev/null
  left=1
fi
nets=$(docker network ls -q --filter name=$p)
if [ -n "$nets" ]; then
  echo "e2e-docker cleanup: removing networks left behind"
  docker network rm $nets >/dev/null
  left=1
fi
vols=$(docker volume ls -q --filter name=$p)
if [ -n "$vols" ]; then
  echo "e2e-docker cleanup: removing volumes left behind: $(echo $vols)"
  docker volume rm -f $vols >/dev/null
  left=1
fi
[ "$left" -eq 0 ] && echo "e2e-docker cleanup: nothing left behind"
exit 0
