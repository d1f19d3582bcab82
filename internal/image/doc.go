// Package image owns OCI images on the host: pulling them from registries
// (go-containerregistry), loading docker-save tarballs and OCI layouts,
// unpacking their layers safely into the shared layer store
// (internal/store), the records of which images are here under which
// references, and what a sandbox needs to run from one (its layers as
// overlay lowers and its config).
package image
