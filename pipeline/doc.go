// Package pipeline runs splitzip's offline jobs over a checkpoint and a
// cache: Compress, Verify, Decompress and Inspect. The CLI is a thin layer
// over it; tests call it directly.
package pipeline
