// Package h1server owns tether's own HTTP/1.1 server loop for cleartext
// and HTTPS listeners. New wraps an http.Server; Serve accepts on a
// listener (ServeTLS on an HTTPS one, shaking hands itself and handing a
// connection that negotiates h2 to the http.Server) and
// reads and answers plain GETs itself, handing a connection, with the
// bytes read so far, to that http.Server at its first other request,
// which ServeHandoff serves; Shutdown ends it gracefully, as
// http.Server.Shutdown. Between requests a connection holds no buffer and
// no request state: it waits on a second descriptor of its socket, or,
// idle, is parked with no goroutine. The loop cancels its requests'
// contexts itself (the client went away, the handler returned), so a
// backend round trip registers its close on cancel with the connection's
// hook instead of a context.AfterFunc. It knows nothing of routing or
// backends: the handler is any http.Handler.
package h1server
