// Package docs checks the repository's Markdown as a reader follows it:
// every relative link names a file or directory that exists and every
// #anchor a heading of its file, as GitHub renders them. It needs no binary
// and no network, so it runs in every `go test ./...`.
package docs
