// Package sockio owns the proxy's TCP sockets below net.Conn: the
// connection type whose reads and writes are raw system calls (so a slow
// loopback write does not hand the scheduler's P to another thread), the
// listener that accepts such connections, the listen configuration that
// sets client TCP keep-alive once on the listening socket, the optional
// yield before each write on one P, and the non-blocking reads and peeks
// the server loop and the lean transport make on a socket's descriptor.
// Nothing here knows HTTP.
package sockio
