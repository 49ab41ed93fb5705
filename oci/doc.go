// Package oci moves splitzip caches through OCI registries: Push makes a
// cache an OCI artifact (one manifest; the cache's index as its config
// blob; every object file and pack as a layer blob, addressed by its
// sha256 digest and annotated with its BLAKE3 key), and Pull makes a
// cache of one, fetching only the files the local cache lacks.
//
// Registries deduplicate by digest, so a checkpoint that shares tensors
// with one pushed before uploads only what is new, and a pull into a
// cache that holds the base downloads only the rest. A pull checks every
// blob's size and digest as it streams, records what it has in the
// cache's index as it goes (so an interrupted pull resumes where it
// stopped), and adds the artifact's sources to the index last: a cache
// the pull did not finish holds no source of it. A blob whose body breaks
// off is asked for again from the byte it stopped at (a Range GET), its
// digest computed over the whole.
//
// The registry client is google/go-containerregistry: references,
// authentication (the Docker credential configuration and helpers, as
// crane reads them), retries and parallel uploads as its users expect.
package oci
