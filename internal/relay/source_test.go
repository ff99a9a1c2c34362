package relay

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// fakePeers: a local client's uid by its IP (the tests connect from
// several loopback addresses); absent: unknown.
type fakePeers map[netip.Addr]int

func (f fakePeers) PeerUID(_, remote netip.AddrPort) (int, bool) {
	uid, ok := f[remote.Addr()]
	return uid, ok
}

func dialFrom(t *testing.T, ip, addr string) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t, c}
}

func clientFrom(e *relayEnv, ip, cred string) *Client {
	c := e.client(cred)
	c.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return d.DialContext(ctx, "tcp", addr)
	}
	return c
}

// TestOneSourceCannotTakeTheUnauthenticatedPool: issue 26's lock-out. Bob
// (uid 1002, on the relay's host, from two addresses) opens idle
// connections: he is held to his source's share, counted by his uid
// whatever address he uses (a fifth takes the place of his oldest); when
// others fill the pool, alice's connection takes the place of bob's oldest
// and authenticates.
func TestOneSourceCannotTakeTheUnauthenticatedPool(t *testing.T) {
	peers := fakePeers{netip.MustParseAddr("127.0.0.2"): 1002, netip.MustParseAddr("127.0.0.4"): 1002,
		netip.MustParseAddr("127.0.0.3"): 1001, netip.MustParseAddr("127.0.0.5"): 1003}
	e := startRelayPeers(t, func(c *Config) {
		c.MaxUnauthenticated, c.MaxUnauthenticatedPerSource, c.AuthTimeout = 6, 4, time.Minute
	}, peers)
	bobSrc := "local uid 1002"
	var bob []*rawConn
	for i := range 4 {
		bob = append(bob, dialFrom(t, []string{"127.0.0.2", "127.0.0.4"}[i%2], e.addr))
		waitFor(t, "bob's connection counted", func() bool { _, n := e.srv.pool.count(bobSrc); return n == i+1 })
	}
	// two from each address, four of his uid: his share is spent, and his
	// fifth replaces his oldest
	bob = append(bob, dialFrom(t, "127.0.0.4", e.addr))
	waitFor(t, "bob's oldest closed for his fifth", func() bool { return bob[0].closed() })
	if _, n := e.srv.pool.count(bobSrc); n != 4 {
		t.Fatalf("bob holds %d, want his share, 4", n)
	}
	for i := range 2 { // carol fills the pool
		dialFrom(t, "127.0.0.5", e.addr)
		waitFor(t, "carol's connection counted", func() bool { _, n := e.srv.pool.count("local uid 1003"); return n == i+1 })
	}
	if all, _ := e.srv.pool.count(""); all != 6 {
		t.Fatalf("%d pending, want the pool full (6)", all)
	}
	if _, err := clientFrom(e, "127.0.0.3", "uid:1001").Append(ctx5(t), "", []byte(`{"alice":1}`), testMAC, 0); err != nil {
		t.Fatalf("alice locked out: %v", err)
	}
	if !bob[1].closed() {
		t.Error("bob's oldest connection still open: alice's should have taken its place")
	}
	if got := counterValue(t, e.m, "isched_relay_connections_total", "verdict", "evicted"); got != 2 {
		t.Errorf("evicted connections counted %v, want 2", got)
	}
	if _, n := e.srv.pool.count(bobSrc); n != 3 {
		t.Errorf("bob holds %d, want 3", n)
	}
}

// TestSourceIsTheAddressWhenTheUIDIsUnknown: without the kernel's word a
// connection counts by its IP, which every user of a compute node shares
// (issue 44: bob's idle sockets from c1 kept alice's job on c1 from
// reporting). Bob holds his address's whole share; alice, from the same
// address, takes the place of his oldest idle connection and
// authenticates; from another address she is not counted against his.
func TestSourceIsTheAddressWhenTheUIDIsUnknown(t *testing.T) {
	const share = 8
	e := startRelayPeers(t, func(c *Config) {
		c.MaxUnauthenticated, c.MaxUnauthenticatedPerSource, c.AuthTimeout = 512, share, time.Minute
	}, fakePeers{})
	var bob []*rawConn
	for i := range share {
		bob = append(bob, dialFrom(t, "127.0.0.2", e.addr))
		waitFor(t, "bob's connection counted", func() bool { _, n := e.srv.pool.count("ip 127.0.0.2"); return n == i+1 })
	}
	if err := clientFrom(e, "127.0.0.2", "uid:1001").Connect(ctx5(t)); err != nil {
		t.Fatalf("alice from bob's address, while he holds its share: %v", err)
	}
	if !bob[0].closed() {
		t.Error("bob's oldest idle connection still open: alice's should have taken its place")
	}
	if err := clientFrom(e, "127.0.0.3", "uid:1001").Connect(ctx5(t)); err != nil {
		t.Fatalf("alice from another address: %v", err)
	}
}

// TestUnauthPool: the pool's admissions, pure.
func TestUnauthPool(t *testing.T) {
	u := newUnauthPool(4, 3)
	add := func(src string) (*pending, *pending, string) {
		p := &pending{src: src}
		ev, why := u.admit(p)
		return p, ev, why
	}
	b1, _, _ := add("bob")
	b2, _, _ := add("bob")
	if _, ev, why := add("bob"); ev != nil || why != "" {
		t.Fatalf("bob's third: evicted %v, %q", ev, why)
	}
	// at his share: his fourth takes the place of his oldest
	if _, ev, why := add("bob"); ev != b1 || why != "" || !b1.evicted {
		t.Fatalf("bob's fourth: evicted %v, %q; want his oldest", ev, why)
	}
	c1, _, _ := add("carol")
	// full: alice (0) takes bob's oldest (3 > 0+1)
	if _, ev, why := add("alice"); ev != b2 || why != "" || !b2.evicted {
		t.Fatalf("alice: evicted %v, %q; want bob's oldest", ev, why)
	}
	// full again: bob 2, carol 1, alice 1; carol (1) may not take from bob (2 is not > 2)
	if _, ev, why := add("carol"); ev != nil || why != fullPool {
		t.Fatalf("carol's second: evicted %v, %q; want %q", ev, why, fullPool)
	}
	u.release(b1) // evicted: uncounted already
	if all, n := u.count("bob"); all != 4 || n != 2 {
		t.Fatalf("after releasing the evicted one: %d in all, bob %d; want 4, 2", all, n)
	}
	u.release(c1)
	if all, n := u.count("carol"); all != 3 || n != 0 {
		t.Fatalf("after carol left: %d in all, carol %d; want 3, 0", all, n)
	}
}

// TestUnauthPoolSilentGoFirst (issue 44): on a shared address, a holder
// reopening idle sockets replaces his own silent ones, never a connection
// whose Hello has begun to arrive, however many times he reconnects; only
// a source whose every place has spoken loses its oldest.
func TestUnauthPoolSilentGoFirst(t *testing.T) {
	u := newUnauthPool(100, 4)
	const c1 = "ip 10.77.0.11"
	alice := &pending{src: c1}
	if ev, why := u.admit(alice); ev != nil || why != "" {
		t.Fatalf("alice: %v %q", ev, why)
	}
	alice.spoke.Store(true)
	for i := range 1000 { // bob's reconnect loop on the same host
		bob := &pending{src: c1}
		ev, why := u.admit(bob)
		if why != "" || (i >= 3 && ev == nil) {
			t.Fatalf("bob's connection %d: evicted %v, %q; want admitted in the place of another", i, ev, why)
		}
		if ev == alice {
			t.Fatalf("bob's connection %d took the place of alice's, which had spoken", i)
		}
	}
	if _, n := u.count(c1); n != 4 {
		t.Fatalf("c1 holds %d, want its share, 4", n)
	}
	// every place spoken: the oldest goes
	for _, p := range u.by[c1] {
		p.spoke.Store(true)
	}
	if ev, _ := u.admit(&pending{src: c1}); ev != alice {
		t.Fatalf("with every place spoken, evicted %v; want the oldest, alice's", ev)
	}
}

// addrConn is a connection with the given addresses.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (a addrConn) LocalAddr() net.Addr  { return a.local }
func (a addrConn) RemoteAddr() net.Addr { return a.remote }

// TestSourceOf: a local client by its uid when known, else by its IP; a
// remote one by its IP, never asked about.
func TestSourceOf(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	peers := fakePeers{netip.MustParseAddr("127.0.0.1"): 1002, netip.MustParseAddr("10.0.0.5"): 1003, netip.MustParseAddr("10.0.0.9"): 7}
	for _, tc := range []struct {
		name          string
		local, remote net.Addr
		want          string
	}{
		{"loopback, uid known", tcp("127.0.0.1:6395"), tcp("127.0.0.1:40000"), "local uid 1002"},
		{"v4-mapped loopback", tcp("[::ffff:127.0.0.1]:6395"), tcp("[::ffff:127.0.0.1]:40000"), "local uid 1002"},
		{"the host's own address", tcp("10.0.0.5:6395"), tcp("10.0.0.5:40000"), "local uid 1003"},
		{"loopback, uid unknown", tcp("127.0.0.1:6395"), tcp("127.0.0.7:40000"), "ip 127.0.0.7"},
		{"another host", tcp("10.0.0.5:6395"), tcp("10.0.0.9:40000"), "ip 10.0.0.9"},
		{"not TCP", pipeAddr{}, pipeAddr{}, "addr pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sourceOf(addrConn{local: tc.local, remote: tc.remote}, peers); got != tc.want {
				t.Errorf("source %q, want %q", got, tc.want)
			}
		})
	}
}
