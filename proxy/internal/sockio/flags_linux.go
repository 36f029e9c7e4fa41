package sockio

import "syscall"

// sendFlags: a send to a peer that has gone answers EPIPE without raising
// SIGPIPE (the runtime would ignore it, but only after its delivery).
const sendFlags = syscall.MSG_NOSIGNAL
