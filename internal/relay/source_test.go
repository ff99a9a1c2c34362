package relay

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/isched/isched/internal/relayproto"
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

func clientFrom(e *relayEnv, ip, cred string) *relayproto.Client {
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

// TestUnauthPoolNewcomerOutlastsTheShare (issue 44): on a shared address,
// a holder's reconnect loop takes his own oldest places first. A
// newcomer (alice, whose Hello is on its way) goes only once as many
// connections as the share holds were admitted after it; once her Hello
// is read whole (verifying) no reconnect takes her place, and a source
// whose every place is being verified refuses the next.
func TestUnauthPoolNewcomerOutlastsTheShare(t *testing.T) {
	const share, c1 = 4, "ip 10.77.0.11"
	u := newUnauthPool(100, share)
	admit := func(what string) (*pending, *pending) {
		t.Helper()
		p := &pending{src: c1}
		ev, why := u.admit(p)
		if why != "" {
			t.Fatalf("%s refused: %q", what, why)
		}
		return p, ev
	}
	var bob []*pending
	for range share {
		p, _ := admit("bob's holder")
		bob = append(bob, p)
	}
	alice, ev := admit("alice")
	if ev != bob[0] {
		t.Fatalf("alice took the place of %v, want bob's oldest", ev)
	}
	for i := range share - 1 { // bob reconnects: his own oldest go
		if _, ev := admit("bob's reconnect"); ev != bob[i+1] {
			t.Fatalf("bob's reconnect %d took the place of %v, want his own oldest", i, ev)
		}
	}
	// the share's worth of newer ones later, she is the oldest: the bound
	if _, ev := admit("bob's reconnect"); ev != alice {
		t.Fatalf("after %d newer admissions evicted %v, want alice's (the oldest)", share, ev)
	}

	alice, _ = admit("alice again")
	if !u.verify(alice) {
		t.Fatal("alice evicted before her Hello was read")
	}
	for i := range 1000 {
		if _, ev := admit("bob's reconnect"); ev == nil || ev == alice {
			t.Fatalf("bob's reconnect %d evicted %v; want one of his own, never alice's while verified", i, ev)
		}
	}
	for _, p := range u.by[c1] {
		u.verify(p)
	}
	if ev, why := u.admit(&pending{src: c1}); ev != nil || why != fullSource {
		t.Fatalf("every place verifying: evicted %v, %q; want refused: %q", ev, why, fullSource)
	}
	if u.verify(bob[0]) {
		t.Error("an evicted connection was marked verifying")
	}
}

// TestUnauthPoolFullTakesTheOldestOfTheLargest: with the pool full and
// several sources holding the most, the oldest of their connections goes
// (a newcomer on one of them is the last to), never one being verified.
func TestUnauthPoolFullTakesTheOldestOfTheLargest(t *testing.T) {
	u := newUnauthPool(5, 10)
	add := func(src string) *pending {
		p := &pending{src: src}
		if ev, why := u.admit(p); ev != nil || why != "" {
			t.Fatalf("%s: evicted %v, %q", src, ev, why)
		}
		return p
	}
	b1 := add("b")
	a1 := add("a")
	b2 := add("b")
	add("a")
	add("c") // full: a 2, b 2, c 1
	u.verify(b1)
	// b1 is the oldest but verifying: a1, the next oldest of a largest source
	if ev, why := u.admit(&pending{src: "d"}); ev != a1 || why != "" {
		t.Fatalf("d: evicted %v, %q; want a's oldest", ev, why)
	}
	// full: a 1, b 2, c 1, d 1: b is the largest; b1 is verifying, so b2
	if ev, why := u.admit(&pending{src: "e"}); ev != b2 || why != "" {
		t.Fatalf("e: evicted %v, %q; want b's oldest not verifying", ev, why)
	}
}

// TestReconnectLoopCannotEvictANewcomer (issue 44): bob's connections
// from alice's address have each sent a byte (a frame's header), and he
// reconnects; alice's connection, silent while her Hello is on its way,
// keeps its place through as many of his reconnects as the share holds
// less one (they take his own oldest) and then authenticates. A pool that
// spared connections that had spoken closed hers at his first reconnect.
func TestReconnectLoopCannotEvictANewcomer(t *testing.T) {
	const share = 4
	e := startRelayPeers(t, func(c *Config) { c.MaxUnauthenticatedPerSource, c.AuthTimeout = share, time.Minute }, fakePeers{})
	evicted := func(n float64) func() bool {
		return func() bool { return counterValue(t, e.m, "isched_relay_connections_total", "verdict", "evicted") == n }
	}
	spoken := 0
	bobSpeaks := func() { // a frame's header and its first byte
		r := dialFrom(t, "127.0.0.2", e.addr)
		r.sendHeader(100)
		if _, err := r.Write([]byte{'{'}); err != nil {
			t.Fatal(err)
		}
		spoken++
		waitFor(t, "bob's first bytes read", func() bool { return e.srv.frames.received.Load() == int64(spoken) })
	}
	for range share {
		bobSpeaks()
	}
	alice := dialFrom(t, "127.0.0.2", e.addr)
	waitFor(t, "alice admitted in the place of bob's oldest", evicted(1))
	for i := range share - 1 {
		bobSpeaks()
		waitFor(t, "bob's reconnect admitted", evicted(float64(i+2)))
	}
	alice.send(hello1001)
	if rep, ok := alice.reply(); !ok || !rep.OK {
		t.Fatalf("alice's hello after %d reconnects of bob: %+v (ok %v), want authenticated", share-1, rep, ok)
	}
}

// gatedVerifier is fakeVerifier holding uid 1001's check until gate
// returns (MUNGE's decoding, made slow).
type gatedVerifier struct{ gate func(ctx context.Context) }

func (g gatedVerifier) Verify(ctx context.Context, cred string) (int, error) {
	uid, err := fakeVerifier{}.Verify(ctx, cred)
	if err == nil && uid == 1001 {
		g.gate(ctx)
	}
	return uid, err
}

// holdFrom is one of bob's sockets from ip, opened again as soon as the
// relay closes it (or answers), each time sending a frame's header and no
// more, until ctx ends; reopened counts the reopenings.
func holdFrom(ctx context.Context, ip, addr string, reopened *atomic.Int64) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		_, _ = c.Write([]byte{0, 0, 0, 100})
		_, _ = c.Read(make([]byte, 1))
		stop()
		_ = c.Close()
		reopened.Add(1)
	}
}

// TestReconnectLoopCannotStarveAHello (issue 44): bob keeps share+2
// sockets open from alice's address, each reopened the moment the relay
// closes it: his reconnect loop turns the address's share over as fast as
// the relay admits. Alice's clients from that address still authenticate
// and append, one after another, even with each credential's check held
// until bob's loop has turned the share over twice: a connection whose
// Hello was read is never evicted, and before that it is the newest.
func TestReconnectLoopCannotStarveAHello(t *testing.T) {
	const share, reports = 8, 10
	var reopened atomic.Int64
	gate := func(ctx context.Context) {
		for from := reopened.Load(); reopened.Load() < from+2*share && ctx.Err() == nil; {
			time.Sleep(time.Millisecond) // a slow credential check, not an assertion
		}
	}
	e := startRelayVerifier(t, func(c *Config) {
		c.MaxUnauthenticatedPerSource, c.AuthTimeout = share, 10*time.Second
		c.Ration.EntryBurst = reports // her ration is not what is tested
	}, fakePeers{}, gatedVerifier{gate})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for range share + 2 {
		wg.Add(1)
		go func() { defer wg.Done(); holdFrom(ctx, "127.0.0.2", e.addr, &reopened) }()
	}
	waitFor(t, "bob's loop turning the share over", func() bool { return reopened.Load() >= 4*share })
	tries := 0
	for i := range reports {
		deadline := time.Now().Add(5 * time.Second)
		for {
			tries++
			_, err := clientFrom(e, "127.0.0.2", "uid:1001").Append(ctx5(t), "", []byte(`{"alice":1}`), testMAC, 0)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("alice's report %d not through within 5 s (%d tries) while bob reconnects: %v", i, tries, err)
			}
		}
	}
	t.Logf("alice's %d reports took %d tries; bob reopened %d sockets", reports, tries, reopened.Load())
	if got := len(e.redis.entries()); got != reports {
		t.Errorf("%d reports appended, want %d", got, reports)
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
