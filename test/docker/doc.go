// Package docker holds tether's container tests: they drive the Docker CLI
// (docker, docker-compose or docker compose) against the FROM scratch images
// that `make docker` builds (tether:dev, tether-demo-backend:dev), as users
// run them. They run only with TETHER_E2E_DOCKER=1 (`make e2e-docker`);
// otherwise every test skips with a message saying so. Each test creates its
// own network and containers, labelled tether-e2e, and removes them, also
// when it fails; their names start with te2e- and the run's TETHER_E2E_RUN,
// so cleanup.sh (which make e2e-docker runs afterwards) removes what a run
// killed before its cleanup left behind.
package docker
