// Package swar holds the word-at-a-time tests the request path's byte
// scans share (field values, response values, the access log's strings):
// eight bytes loaded as one word, then whether any of them is below a
// bound or equal to a byte, exact as to whether there is one.
package swar
