// Command fleetsim prints docs/DISTRIBUTION.md's table: many nodes
// starting one model, raw safetensors beside splitzip caches, from the
// origin alone, through mirrors and peer to peer (package
// internal/fleetsim). Its defaults are an 8B Llama-shaped BF16 model and
// this project's measured ratios and load rates (docs/PERF.md).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/splitzip/splitzip/internal/fleetsim"
)

func main() {
	nodes := flag.Int("nodes", 1000, "nodes starting the model")
	raw := flag.Float64("gb", 16.06, "the model's raw size, GB (an 8B model in BF16)")
	origin := flag.Float64("origin", 25, "the origin's egress (registry or object store), GB/s")
	node := flag.Float64("node", 12.5, "a node's network link, GB/s (100 Gbit/s)")
	mirrors := flag.Int("mirrors", 16, "mirrors (each of egress --mirror)")
	mirror := flag.Float64("mirror", 25, "a mirror's egress, GB/s")
	changed := flag.Float64("changed", 0.1, "the share of a fine-tune's tensors a node holding its base lacks")
	asJSON := flag.Bool("json", false, "print the results as JSON")
	flag.Parse()

	// Bytes as stored and first-load rates of raw bytes onto an H200,
	// measured on the 8 GiB Llama shape (docs/PERF.md): fixed 12.014
	// bits a value, entropy 10.636; loads 40.7-44.4 GB/s raw and
	// 57.4-61.2 GB/s fixed (the lower ends here); entropy payloads load at
	// the fixed rate or less (they decode at half its speed), so fixed's.
	formats := []struct {
		name        string
		ratio, rate float64
	}{{"raw safetensors", 1, 40.7}, {"splitzip fixed", 12.014 / 16, 57.4}, {"splitzip entropy", 10.636 / 16, 57.4}}
	var results []fleetsim.Result
	if !*asJSON {
		fmt.Printf("| way | checkpoint | fetched by each node | origin sends | links carry | first ready | median | last ready |\n|---|---|---|---|---|---|---|---|\n")
	}
	for _, way := range []string{fleetsim.Origin, fleetsim.Mirrors, fleetsim.P2P} {
		for _, share := range []float64{1, *changed} {
			for _, f := range formats {
				c := fleetsim.Config{Way: way, Nodes: *nodes, Bytes: *raw * 1e9 * f.ratio * share, RawBytes: *raw * 1e9, LoadRate: f.rate * 1e9,
					Piece: 64 << 20, OriginRate: *origin * 1e9, NodeRate: *node * 1e9, MirrorRate: *mirror * 1e9, MirrorCount: *mirrors, Seed: 1}
				r, err := fleetsim.Run(c)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				results = append(results, r)
				if *asJSON {
					continue
				}
				what := f.name
				if share != 1 {
					what += fmt.Sprintf(", fine-tune (%.0f%% new)", 100*share)
				}
				fmt.Printf("| %s | %s | %.2f GB | %.0f GB | %.0f GB | %.2f s | %.2f s | %.2f s |\n", way, what, c.Bytes/1e9,
					r.OriginBytes/1e9, r.NetworkBytes/1e9, r.First, r.Median, r.Last)
			}
		}
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(results)
	}
}
