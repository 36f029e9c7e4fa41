// Package httpdate owns the Date field's value that the proxy's HTTP/1.1
// and HTTP/2 servers add to a response without one: formatted once a
// second and shared, as Kestrel's DateHeaderValueManager and nginx's
// cached time do. A response reads the monotonic clock only and formats
// nothing until the second its value was made for is over.
package httpdate
