package fleetsim

import (
	"errors"
	"math"
	"testing"
)

const gb = 1e9

func base(way string, nodes int) Config {
	return Config{Way: way, Nodes: nodes, Bytes: 4 * gb, RawBytes: 4 * gb, LoadRate: 40 * gb, Piece: 64 << 20,
		OriginRate: 25 * gb, NodeRate: 12.5 * gb, MirrorRate: 25 * gb, MirrorCount: 4, Seed: 1}
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want }

// TestOneNode: a node alone fetches at its link's rate and loads at the
// load rate; every way moves its bytes once from the origin (twice,
// through a mirror).
func TestOneNode(t *testing.T) {
	for _, way := range []string{Origin, P2P, Mirrors} {
		c := base(way, 1)
		c.MirrorCount = 1
		r, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		want := c.Bytes/c.NodeRate + c.RawBytes/c.LoadRate
		if way == Mirrors {
			want += c.Piece / c.NodeRate // a piece reaches the mirror a tick before the node
		}
		if !near(r.Last, want, 0.01) || r.First != r.Last {
			t.Errorf("%s: ready after %g s, want %g", way, r.Last, want)
		}
		hops := 1.0
		if way == Mirrors {
			hops = 2
		}
		if !near(r.NetworkBytes, hops*c.Bytes, 0.01) || !near(r.OriginBytes, c.Bytes, 0.01) {
			t.Errorf("%s: origin %g, network %g bytes", way, r.OriginBytes, r.NetworkBytes)
		}
	}
}

// TestOriginBound: from the origin alone, many nodes share its egress:
// the last is ready after every node's bytes crossed it.
func TestOriginBound(t *testing.T) {
	c := base(Origin, 200)
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	want := float64(c.Nodes)*c.Bytes/c.OriginRate + c.RawBytes/c.LoadRate
	if !near(r.Last, want, 0.02) || !near(r.OriginBytes, float64(c.Nodes)*c.Bytes, 0.01) {
		t.Errorf("last ready %g s (want %g), origin sent %g bytes", r.Last, want, r.OriginBytes)
	}
}

// TestP2PScales: peer to peer, the origin sends a few copies, every node
// still receives every byte, and the last node is ready in a small
// multiple of one node's time, where the origin alone takes hundreds.
func TestP2PScales(t *testing.T) {
	o, err := Run(base(Origin, 1000))
	if err != nil {
		t.Fatal(err)
	}
	c := base(P2P, 1000)
	p, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	one := c.Bytes/c.NodeRate + c.RawBytes/c.LoadRate
	if p.Last > 3*one || p.Last*50 > o.Last {
		t.Errorf("p2p last ready %g s, one node %g, origin alone %g", p.Last, one, o.Last)
	}
	if p.OriginBytes > 0.05*float64(c.Nodes)*c.Bytes || !near(p.NetworkBytes, float64(c.Nodes)*c.Bytes, 0.001) {
		t.Errorf("p2p: origin %g, network %g bytes", p.OriginBytes, p.NetworkBytes)
	}
	m, err := Run(base(Mirrors, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if !near(m.OriginBytes, 4*c.Bytes, 0.01) || m.Last >= o.Last {
		t.Errorf("mirrors: origin %g bytes, last ready %g s (origin alone %g)", m.OriginBytes, m.Last, o.Last)
	}
}

// TestFewerBytes: a cache of three quarters of the bytes is ready sooner
// by every way, and fetching nothing leaves the load alone.
func TestFewerBytes(t *testing.T) {
	for _, way := range []string{Origin, Mirrors, P2P} {
		raw, err := Run(base(way, 300))
		if err != nil {
			t.Fatal(err)
		}
		c := base(way, 300)
		c.Bytes *= 0.75
		c.LoadRate = 55 * gb
		z, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		if z.Last >= raw.Last || z.OriginBytes >= raw.OriginBytes {
			t.Errorf("%s: cache ready %g s, raw %g; origin %g against %g bytes", way, z.Last, raw.Last, z.OriginBytes, raw.OriginBytes)
		}
		c.Bytes = 0
		n, err := Run(c)
		if err != nil || n.Last != c.RawBytes/c.LoadRate || n.NetworkBytes != 0 {
			t.Errorf("%s: nothing to fetch: %+v, %v", way, n, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		func() Config { c := base("bittorrent", 2); return c }(),
		func() Config { c := base(Origin, 0); return c }(),
		func() Config { c := base(Origin, 2); c.NodeRate = 0; return c }(),
		func() Config { c := base(Mirrors, 2); c.MirrorCount = 0; return c }(),
		func() Config { c := base(P2P, 2); c.Piece = 0; return c }(),
	} {
		if _, err := Run(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
