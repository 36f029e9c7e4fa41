// Command demo-backend is the backend of the Compose demo and of the Docker
// end-to-end tests: it answers every request with its name (the
// X-Demo-Backend header and the body) and /healthz with 200. It is built
// into its own FROM scratch image by deploy/build-image.sh.
package main
