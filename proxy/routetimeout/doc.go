// Package routetimeout owns route timeouts (Route.Timeout), as ASP.NET's
// request timeouts bound a YARP route: the whole exchange, from routing to
// the end of the response body. Before the response starts the request
// gets 504; after, the connection is cut. As in YARP, the timeout stops
// once an upgrade (WebSocket) is accepted: such connections are meant to
// be long. A gRPC request's grpc-timeout bounds it further (ForRequest).
package routetimeout
