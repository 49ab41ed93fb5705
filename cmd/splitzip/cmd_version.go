package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/splitzip/splitzip/codec"
	"github.com/splitzip/splitzip/codec/entropy"
	"github.com/splitzip/splitzip/shardcache"
)

// versionInfo is what `splitzip version` and `--version` print: the
// release, the formats this build reads and writes, and the Go build.
type versionInfo struct {
	Version       string `json:"version"`
	PayloadFormat int    `json:"payload_format"`
	EntropyFormat int    `json:"entropy_payload_format"`
	IndexVersion  int    `json:"cache_index_version"`
	ABIVersion    int    `json:"c_abi_version"`
	GoVersion     string `json:"go_version"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
}

func currentVersion() versionInfo {
	return versionInfo{
		Version: version, PayloadFormat: int(codec.Version), EntropyFormat: int(entropy.PayloadVersion),
		IndexVersion: int(shardcache.IndexVersion), ABIVersion: abiVersion,
		GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
	}
}

// newVersionCommand is `version`: the same as --version.
func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the release, the formats it reads and the Go build (as --version)",
		Args:  args(cobra.NoArgs),
		RunE:  func(*cobra.Command, []string) error { return printVersion(g) },
	}
}

// printVersion prints the version as one line, or with --json as a
// document of message_type "version".
func printVersion(g *globals) error {
	v := currentVersion()
	if g.JSON {
		return printJSON(g.stdout, "version", v)
	}
	_, err := fmt.Fprintf(g.stdout, "splitzip %s (payload format %d, entropy payload format %d, cache index %d, C ABI %d; %s %s/%s)\n",
		v.Version, v.PayloadFormat, v.EntropyFormat, v.IndexVersion, v.ABIVersion, v.GoVersion, v.OS, v.Arch)
	return err
}
