// Package fleetsim simulates many nodes fetching one checkpoint at once:
// the bytes each link carries and when each node is ready, for raw
// safetensors beside a splitzip cache (fewer bytes, decoded on the GPU)
// and for three ways of moving them: every node from the origin (a
// registry or object store), through mirrors, and peer to peer (as the
// P2P layers that speak OCI, Dragonfly and Kraken, do).
//
// The model is a fluid of pieces in ticks. A tick is the time a node's
// link takes to carry one piece; in a tick a node receives at most one
// piece and, peer to peer, sends at most one, and the origin sends as
// many as its egress allows (fractions carried to the next tick). A node
// takes its first missing piece from the origin or its mirror (once
// that holds it); peer to peer it first asks a few random nodes that
// hold that piece or other pieces it lacks and have room this tick, and
// turns to the origin when none has. A piece received in a tick is sent
// on from the next. A node is
// ready when it holds every piece and has loaded them onto its GPUs at
// the load rate. Latency, TCP ramp-up, stragglers and failures are left
// out: the numbers are lower bounds of what each way can do.
package fleetsim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Ways of moving the bytes.
const (
	Origin  = "origin"  // every node from the origin
	Mirrors = "mirrors" // mirrors fetch from the origin, nodes from their mirror
	P2P     = "p2p"     // nodes from each other, the origin seeding
)

// ErrConfig reports a configuration that cannot be simulated.
var ErrConfig = errors.New("fleetsim: invalid configuration")

// Config is one simulated start.
type Config struct {
	Way   string `json:"way"` // Origin, Mirrors or P2P
	Nodes int    `json:"nodes"`
	// Bytes is what each node must fetch: the checkpoint's bytes as
	// stored (raw, or a cache's), times the share it lacks (a node that
	// holds a base model fetches only a fine-tune's new tensors).
	Bytes float64 `json:"bytes"`
	// RawBytes is the checkpoint's raw size, which a node loads onto its
	// GPUs at LoadRate (raw bytes a second) once it holds every piece.
	RawBytes float64 `json:"raw_bytes"`
	LoadRate float64 `json:"load_rate"`
	Piece    float64 `json:"piece_bytes"`
	// OriginRate is the origin's egress, NodeRate a node's link (each
	// way), MirrorRate a mirror's egress; bytes a second.
	OriginRate  float64 `json:"origin_rate"`
	NodeRate    float64 `json:"node_rate"`
	MirrorRate  float64 `json:"mirror_rate"`
	MirrorCount int     `json:"mirrors"`
	Seed        uint64  `json:"seed"`
}

// Result is what a simulated start moved and took.
type Result struct {
	Config
	OriginBytes  float64 `json:"origin_bytes"`  // sent by the origin
	NetworkBytes float64 `json:"network_bytes"` // carried by every link together
	// Seconds until the first node, the median node and the last node
	// were ready (fetched and loaded).
	First  float64 `json:"first_s"`
	Median float64 `json:"median_s"`
	Last   float64 `json:"last_s"`
}

func (c Config) check() error {
	switch {
	case c.Way != Origin && c.Way != Mirrors && c.Way != P2P:
		return fmt.Errorf("%w: way %q", ErrConfig, c.Way)
	case c.Nodes < 1 || c.Bytes < 0 || c.RawBytes < 0 || c.Piece <= 0 || c.LoadRate <= 0:
		return fmt.Errorf("%w: %d nodes, %g bytes, %g raw, pieces of %g, load rate %g", ErrConfig, c.Nodes, c.Bytes, c.RawBytes, c.Piece, c.LoadRate)
	case c.OriginRate <= 0 || c.NodeRate <= 0:
		return fmt.Errorf("%w: origin %g B/s, node %g B/s", ErrConfig, c.OriginRate, c.NodeRate)
	case c.Way == Mirrors && (c.MirrorCount < 1 || c.MirrorRate <= 0):
		return fmt.Errorf("%w: %d mirrors of %g B/s", ErrConfig, c.MirrorCount, c.MirrorRate)
	}
	return nil
}

// sender is something that sends pieces: the origin, a mirror or a node.
type sender struct {
	perTick float64 // pieces a tick it may send
	budget  float64 // left this tick
	has     int     // pieces it holds (in order)
	ready   int     // pieces it held when the tick began: what it may send
}

// refill starts a tick: a fraction of a piece left over carries on, an
// unspent budget does not.
func (s *sender) refill() {
	s.budget = math.Mod(s.budget, 1) + s.perTick
	s.ready = s.has
}

// take spends a piece of the sender's budget, if it has one.
func (s *sender) take() bool {
	if s.budget < 1 {
		return false
	}
	s.budget--
	return true
}

// Run simulates c.
func Run(c Config) (Result, error) {
	if err := c.check(); err != nil {
		return Result{}, err
	}
	pieces := int(math.Ceil(c.Bytes / c.Piece))
	tick := c.Piece / c.NodeRate
	res := Result{Config: c}
	load := c.RawBytes / c.LoadRate
	if pieces == 0 {
		res.First, res.Median, res.Last = load, load, load
		return res, nil
	}
	origin := &sender{perTick: c.OriginRate * tick / c.Piece, has: pieces}
	var mirrors []*sender
	if c.Way == Mirrors {
		for range c.MirrorCount {
			mirrors = append(mirrors, &sender{perTick: c.MirrorRate * tick / c.Piece})
		}
	}
	nodes := make([]*sender, c.Nodes)
	for i := range nodes {
		nodes[i] = &sender{perTick: 1}
	}
	// holders[k]: the nodes that hold piece k (peer to peer); held[i][k]:
	// node i holds piece k; next[i]: the first piece node i lacks.
	holders := make([][]int, pieces)
	held := make([][]bool, c.Nodes)
	for i := range held {
		held[i] = make([]bool, pieces)
	}
	next := make([]int, c.Nodes)
	seed, seeding := 0, make([]bool, pieces) // the origin's next new piece; those sent
	rng := rand.New(rand.NewPCG(c.Seed, 1))
	done := make([]float64, 0, c.Nodes)
	order := make([]int, c.Nodes)
	for i := range order {
		order[i] = i
	}
	var sentOrigin, sentAll int
	for t := 1; len(done) < c.Nodes; t++ {
		if t > 100*(pieces+c.Nodes)+int(float64(pieces*c.Nodes)/origin.perTick)+10 {
			return Result{}, fmt.Errorf("fleetsim: no progress after %d ticks", t)
		}
		origin.refill()
		for _, m := range mirrors {
			m.refill()
		}
		for _, n := range nodes {
			n.refill()
		}
		// Mirrors fill from the origin first, as fast as their links
		// take (as fast as they give); a piece is theirs to send next tick.
		for _, m := range mirrors {
			for r := 1.0; r <= max(m.perTick, 1) && m.has < pieces && origin.take(); r++ {
				m.has++
				sentOrigin++
				sentAll++
			}
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		type arrival struct{ node, piece int }
		var got []arrival // pieces received this tick, theirs to send from the next
		for _, i := range order {
			n := nodes[i]
			if n.has == pieces {
				continue
			}
			k := next[i]
			switch {
			case c.Way == P2P:
				if pk, ok := fromPeer(nodes, holders, held[i], k, rng); ok {
					k = pk
					break
				}
				if !origin.take() {
					continue
				}
				// The origin seeds a piece no node has yet, while there
				// is one: the swarm spreads the others.
				for seed < pieces && (len(holders[seed]) > 0 || seeding[seed]) {
					seed++
				}
				if seed < pieces && !held[i][seed] {
					k = seed
					seeding[seed] = true
				}
				sentOrigin++
			case c.Way == Mirrors:
				if m := mirrors[i%len(mirrors)]; m.ready <= k || !m.take() {
					continue
				}
			case !origin.take():
				continue
			default:
				sentOrigin++
			}
			sentAll++
			got = append(got, arrival{i, k})
		}
		for _, a := range got {
			n := nodes[a.node]
			held[a.node][a.piece] = true
			for next[a.node] < pieces && held[a.node][next[a.node]] {
				next[a.node]++
			}
			if c.Way == P2P {
				holders[a.piece] = append(holders[a.piece], a.node)
			}
			n.has++
			if n.has == pieces {
				done = append(done, float64(t)*tick+load)
			}
		}
	}
	slices.Sort(done)
	res.First, res.Median, res.Last = done[0], done[len(done)/2], done[len(done)-1]
	res.OriginBytes = float64(sentOrigin) * c.Bytes / float64(pieces)
	res.NetworkBytes = float64(sentAll) * c.Bytes / float64(pieces)
	return res, nil
}

// Peer to peer, a node asks peerProbes holders of a piece (a tracker's
// answer is a few peers, not all) for its first missing piece and then
// for up to otherPieces other missing pieces at random, before it turns
// to the origin for the first: pieces spread out of order, as they do in
// swarms.
const (
	peerProbes  = 4
	otherPieces = 4
)

// fromPeer finds a piece node lacks (held) that a holder with room this
// tick sends it, the first missing one (first) tried first, and takes
// the holder's budget.
func fromPeer(nodes []*sender, holders [][]int, held []bool, first int, rng *rand.Rand) (int, bool) {
	try := func(k int) bool {
		hs := holders[k]
		if held[k] || len(hs) == 0 {
			return false
		}
		for range peerProbes {
			if nodes[hs[rng.IntN(len(hs))]].take() {
				return true
			}
		}
		return false
	}
	if try(first) {
		return first, true
	}
	for range otherPieces {
		if k := first + rng.IntN(len(held)-first); try(k) {
			return k, true
		}
	}
	return 0, false
}
