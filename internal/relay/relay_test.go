package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/relayproto"
)

// fakeVerifier: a credential "uid:N" is uid N, anything else is refused.
type fakeVerifier struct{}

func (fakeVerifier) Verify(_ context.Context, cred string) (int, error) {
	var uid int
	if _, err := fmt.Sscanf(cred, "uid:%d", &uid); err != nil {
		return -1, fmt.Errorf("%w: garbled", relayproto.ErrCredential)
	}
	return uid, nil
}

type appended struct {
	stream, payload, mac string
	uid                  int
	maxLen               int64
}

// fakeRedis records appends.
type fakeRedis struct {
	mu   sync.Mutex
	got  []appended
	fail error
}

func (f *fakeRedis) AppendFrom(_ context.Context, stream string, payload []byte, mac string, uid int, maxLen int64) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return "", f.fail
	}
	f.got = append(f.got, appended{stream, string(payload), mac, uid, maxLen})
	return fmt.Sprintf("%d-0", len(f.got)), nil
}

func (f *fakeRedis) entries() []appended {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]appended(nil), f.got...)
}

// clock is a settable time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const testMAC = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

type relayEnv struct {
	t     testing.TB
	addr  string
	redis *fakeRedis
	clk   *clock
	cfg   Config
	srv   *Server
	m     *Metrics
}

func startRelay(t testing.TB, mod func(*Config)) *relayEnv {
	t.Helper()
	return startRelayPeers(t, mod, nil)
}

// startRelayPeers starts a relay that learns local peers' uids from peers
// (nil: the kernel's tables).
func startRelayPeers(t testing.TB, mod func(*Config), peers peerUIDs) *relayEnv {
	t.Helper()
	return startRelayVerifier(t, mod, peers, fakeVerifier{})
}

// startRelayVerifier is startRelayPeers with credentials checked by v.
func startRelayVerifier(t testing.TB, mod func(*Config), peers peerUIDs, v Verifier) *relayEnv {
	t.Helper()
	cfg := DefaultConfig("isched:lab:ingest")
	cfg.Ration = Ration{EntriesPerSec: 10, EntryBurst: 5, BytesPerSec: 1 << 20, ByteBurst: 1 << 20}
	cfg.AuthTimeout = 300 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	e := &relayEnv{t: t, redis: &fakeRedis{}, clk: &clock{t: time.Unix(1_800_000_000, 0)}, cfg: cfg, m: NewMetrics()}
	s, err := NewServer(cfg, v, e.redis, e.clk.now, e.m, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = s
	if peers != nil {
		s.peers = peers
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return e
}

func (e *relayEnv) client(cred string) *relayproto.Client {
	c := &relayproto.Client{Addr: e.addr, Cred: func(context.Context) (string, error) { return cred, nil }}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func refusal(err error) string {
	var r *relayproto.Refused
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

// TestRelayAppendsToItsOwnStream: the entry goes to the relay's stream,
// with the relay's cap and the uid the credential proved, whatever the
// client asks for.
func TestRelayAppendsToItsOwnStream(t *testing.T) {
	e := startRelay(t, nil)
	c := e.client("uid:1001")
	for i := range 3 {
		id, err := c.Append(ctx5(t), "isched:other:ingest", []byte(fmt.Sprintf(`{"n":%d}`, i)), testMAC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d-0", i+1); id != want {
			t.Errorf("id %q, want %q", id, want)
		}
	}
	got := e.redis.entries()
	if len(got) != 3 {
		t.Fatalf("%d entries appended, want 3", len(got))
	}
	for i, a := range got {
		want := appended{"isched:lab:ingest", fmt.Sprintf(`{"n":%d}`, i), testMAC, 1001, 100000}
		if a != want {
			t.Errorf("entry %d: %+v, want %+v", i, a, want)
		}
	}
}

// TestRations: the token buckets, pure.
func TestRations(t *testing.T) {
	lim := Ration{EntriesPerSec: 2, EntryBurst: 3, BytesPerSec: 100, ByteBurst: 250}
	t0 := time.Unix(0, 0)
	type step struct {
		uid, size int
		at        time.Duration
		ok        bool
		wait      time.Duration
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"burst of entries then refused", []step{{1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 0, false, 500 * time.Millisecond}}},
		{"refilled at the rate", []step{{1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 500 * time.Millisecond, true, 0}, {1, 1, 500 * time.Millisecond, false, 500 * time.Millisecond}}},
		{"bytes run out before entries", []step{{1, 200, 0, true, 0}, {1, 100, 0, false, 500 * time.Millisecond}, {1, 50, 0, true, 0}}},
		{"another uid has its own buckets", []step{{1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 0, true, 0}, {1, 1, 0, false, 500 * time.Millisecond}, {2, 1, 0, true, 0}}},
		{"never above the burst", []step{{1, 1, time.Hour, true, 0}, {1, 1, time.Hour, true, 0}, {1, 1, time.Hour, true, 0}, {1, 1, time.Hour, false, 500 * time.Millisecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRations(lim)
			for i, s := range tc.steps {
				ok, wait := r.take(s.uid, s.size, t0.Add(s.at))
				if ok != s.ok || wait != s.wait {
					t.Fatalf("step %d %+v: ok %v wait %v", i, s, ok, wait)
				}
			}
		})
	}
}

// TestFloodingUIDDoesNotStarveAnother: bob spends his ration and is refused
// at once with a retry time; alice, at the same instant, is not.
func TestFloodingUIDDoesNotStarveAnother(t *testing.T) {
	e := startRelay(t, nil)
	bob, alice := e.client("uid:1002"), e.client("uid:1001")
	throttled := 0
	for range 50 {
		_, err := bob.Append(ctx5(t), "", []byte(`{}`), testMAC, 0)
		if refusal(err) == relayproto.CodeThrottled {
			throttled++
			var r *relayproto.Refused
			errors.As(err, &r)
			if r.RetryMS <= 0 {
				t.Errorf("throttled without a retry time: %+v", r.Reply)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if throttled != 50-int(e.cfg.Ration.EntryBurst) {
		t.Errorf("bob throttled %d times, want %d", throttled, 50-int(e.cfg.Ration.EntryBurst))
	}
	for range int(e.cfg.Ration.EntryBurst) {
		if _, err := alice.Append(ctx5(t), "", []byte(`{"alice":1}`), testMAC, 0); err != nil {
			t.Fatalf("alice refused while bob floods: %v", err)
		}
	}
	// bob's refused connection still works once his ration refills
	e.clk.add(time.Second)
	if _, err := bob.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); err != nil {
		t.Fatalf("bob after the refill: %v", err)
	}
	byUID := map[int]int{}
	for _, a := range e.redis.entries() {
		byUID[a.uid]++
	}
	if byUID[1001] != 5 || byUID[1002] != 6 {
		t.Errorf("appended per uid %v, want 1001:5 1002:6", byUID)
	}
}

// rawConn speaks the protocol byte by byte, as a hostile client would.
type rawConn struct {
	t *testing.T
	net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return &rawConn{t, c}
}

func (r *rawConn) send(body string) {
	if _, err := r.Write(relayproto.AppendFrame(nil, []byte(body))); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) sendHeader(n uint32) {
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], n)
	if _, err := r.Write(h[:]); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads one Reply; ok false when the connection ended instead.
func (r *rawConn) reply() (relayproto.Reply, bool) {
	b, err := relayproto.ReadFrame(r, relayproto.MaxFrame)
	if err != nil {
		return relayproto.Reply{}, false
	}
	var rep relayproto.Reply
	if err := relayproto.DecodeStrict(b, &rep); err != nil {
		r.t.Fatalf("reply %q: %v", b, err)
	}
	return rep, true
}

// closed reports whether the relay closed the connection (EOF on read).
func (r *rawConn) closed() bool {
	_, err := r.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

const hello1001 = `{"v":1,"cred":"uid:1001"}`

// TestHostileFrames: whatever a client sends, nothing reaches Redis that is
// not a bounded, well-formed entry of the relay's choosing, and the
// refusal names what was wrong.
func TestHostileFrames(t *testing.T) {
	big := strings.Repeat("a", 64<<10) // a report of MaxPayload+: the JSON string below is over it
	for _, tc := range []struct {
		name   string
		hello  string // "" : none sent
		frame  func(r *rawConn)
		code   string // the reply's code
		closes bool   // the relay closes the connection
	}{
		{"entry before hello", "", func(r *rawConn) { r.send(`{"m":"{}","mac":"` + testMAC + `"}`) }, relayproto.CodeAuth, true},
		{"garbled credential", "", func(r *rawConn) { r.send(`{"v":1,"cred":"MUNGE:garbage"}`) }, relayproto.CodeAuth, true},
		{"hello with unknown fields", "", func(r *rawConn) { r.send(`{"v":1,"cred":"uid:1001","uid":0}`) }, relayproto.CodeAuth, true},
		{"hello with a duplicate credential", "", func(r *rawConn) { r.send(`{"v":1,"cred":"MUNGE:garbage","cred":"uid:1001"}`) }, relayproto.CodeAuth, true},
		{"hello with a case-folded key", "", func(r *rawConn) { r.send(`{"v":1,"Cred":"uid:1001"}`) }, relayproto.CodeAuth, true},
		{"hello of another version", "", func(r *rawConn) { r.send(`{"v":2,"cred":"uid:1001"}`) }, relayproto.CodeAuth, true},
		{"hello not JSON", "", func(r *rawConn) { r.send(`XADD isched:lab:ingest MAXLEN 0 * m x`) }, relayproto.CodeAuth, true},
		{"frame over the limit before hello", "", func(r *rawConn) { r.sendHeader(relayproto.MaxFrame + 1) }, relayproto.CodeAuth, true},
		{"hello over the hello limit", "", func(r *rawConn) { r.sendHeader(relayproto.MaxHello + 1) }, relayproto.CodeAuth, true},
		{"frame over the limit", hello1001, func(r *rawConn) { r.sendHeader(1 << 31) }, relayproto.CodeBadEntry, true},
		{"empty frame", hello1001, func(r *rawConn) { r.sendHeader(0) }, relayproto.CodeBadEntry, true},
		{"client-named stream", hello1001, func(r *rawConn) {
			r.send(`{"m":"{}","mac":"` + testMAC + `","stream":"isched:x:ingest"}`)
		}, relayproto.CodeBadEntry, false},
		{"client-chosen cap", hello1001, func(r *rawConn) { r.send(`{"m":"{}","mac":"` + testMAC + `","maxlen":0}`) }, relayproto.CodeBadEntry, false},
		{"client-chosen id", hello1001, func(r *rawConn) {
			r.send(`{"m":"{}","mac":"` + testMAC + `","id":"18446744073709551615-18446744073709551615"}`)
		}, relayproto.CodeBadEntry, false},
		{"oversize report", hello1001, func(r *rawConn) { r.send(`{"m":"\"` + big + `\"","mac":"` + testMAC + `"}`) }, relayproto.CodeOversize, false},
		{"report not JSON", hello1001, func(r *rawConn) { r.send(`{"m":"not json","mac":"` + testMAC + `"}`) }, relayproto.CodeBadEntry, false},
		{"mac not hex", hello1001, func(r *rawConn) { r.send(`{"m":"{}","mac":"zz"}`) }, relayproto.CodeBadEntry, false},
		{"entry with a duplicate mac", hello1001, func(r *rawConn) { r.send(`{"m":"{}","mac":"zz","mac":"` + testMAC + `"}`) }, relayproto.CodeBadEntry, false},
		{"entry with a case-folded key", hello1001, func(r *rawConn) { r.send(`{"m":"{}","MAC":"` + testMAC + `"}`) }, relayproto.CodeBadEntry, false},
		{"two objects in a frame", hello1001, func(r *rawConn) { r.send(`{"m":"{}","mac":"` + testMAC + `"}{}`) }, relayproto.CodeBadEntry, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startRelay(t, nil)
			r := dialRaw(t, e.addr)
			if tc.hello != "" {
				r.send(tc.hello)
				if rep, ok := r.reply(); !ok || !rep.OK {
					t.Fatalf("hello: %+v %v", rep, ok)
				}
			}
			tc.frame(r)
			rep, ok := r.reply()
			if !ok || rep.Code != tc.code || rep.Err == "" {
				t.Fatalf("reply %+v (ok %v), want code %q with a reason", rep, ok, tc.code)
			}
			if tc.closes {
				if !r.closed() {
					t.Error("connection still open")
				}
			} else {
				// the connection still serves a good entry
				r.send(`{"m":"{\"ok\":1}","mac":"` + testMAC + `"}`)
				if rep, ok := r.reply(); !ok || !rep.OK {
					t.Fatalf("good entry after the refusal: %+v %v", rep, ok)
				}
			}
			for _, a := range e.redis.entries() {
				if a.payload != `{"ok":1}` || a.stream != e.cfg.Stream || a.maxLen != e.cfg.MaxLen {
					t.Errorf("appended %+v", a)
				}
			}
		})
	}
}

// TestClientThatNeverAuthenticates: silent connections are closed after
// AuthTimeout and count against a bound, so they cannot pile up.
func TestClientThatNeverAuthenticates(t *testing.T) {
	// the bound: with a deadline no slow machine reaches, the third
	// silent connection is refused at once, once the relay has counted
	// the first two (each connection's goroutine counts it)
	bound := startRelay(t, func(c *Config) { c.MaxUnauthenticated = 2; c.AuthTimeout = time.Hour })
	_, _ = dialRaw(t, bound.addr), dialRaw(t, bound.addr)
	waitFor(t, "two unauthenticated connections counted", func() bool { n, _ := bound.srv.pool.count(""); return n == 2 })
	if rep, ok := dialRaw(t, bound.addr).reply(); !ok || rep.Code != relayproto.CodeBusy {
		t.Fatalf("third unauthenticated connection not refused: %+v %v", rep, ok)
	}
	// the deadline: silent ones are closed after AuthTimeout (the
	// deadline is the relay's; the client's own is only a backstop)
	e := startRelay(t, func(c *Config) { c.MaxUnauthenticated = 2; c.AuthTimeout = 300 * time.Millisecond })
	_, b := dialRaw(t, e.addr), dialRaw(t, e.addr)
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	if !b.closed() {
		t.Fatal("silent connection not closed")
	}
	// and their slots are free again: an authenticating client gets in
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.client("uid:1001").Append(ctx5(t), "", []byte(`{}`), testMAC, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot freed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConnectionsPerUID: one uid cannot hold every connection.
func TestConnectionsPerUID(t *testing.T) {
	e := startRelay(t, func(c *Config) { c.MaxConnsPerUID = 2 })
	for i := range 2 {
		if err := e.client("uid:1002").Connect(ctx5(t)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
	}
	if err := e.client("uid:1002").Connect(ctx5(t)); refusal(err) != relayproto.CodeBusy {
		t.Fatalf("third connection of uid 1002: %v, want busy", err)
	}
	if err := e.client("uid:1001").Connect(ctx5(t)); err != nil {
		t.Fatalf("another uid: %v", err)
	}
}

// TestClientReconnects: after the relay refused or lost an entry, the next
// Append opens a new connection with a new credential.
func TestClientReconnects(t *testing.T) {
	e := startRelay(t, nil)
	creds := 0
	c := &relayproto.Client{Addr: e.addr, Cred: func(context.Context) (string, error) { creds++; return "uid:1001", nil }}
	t.Cleanup(func() { _ = c.Close() })
	e.redis.mu.Lock()
	e.redis.fail = errors.New("OOM command not allowed")
	e.redis.mu.Unlock()
	if _, err := c.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); refusal(err) != relayproto.CodeUnavail {
		t.Fatalf("append while Redis fails: %v, want %s", err, relayproto.CodeUnavail)
	}
	e.redis.mu.Lock()
	e.redis.fail = nil
	e.redis.mu.Unlock()
	if _, err := c.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); err != nil {
		t.Fatal(err)
	}
	if creds != 2 {
		t.Errorf("%d credentials made, want 2 (one per connection)", creds)
	}
	// a relay that is gone is an error, never a hang
	bad := &relayproto.Client{Addr: "127.0.0.1:1", Cred: func(context.Context) (string, error) { return "uid:1", nil }}
	if _, err := bad.Append(ctx5(t), "", []byte(`{}`), testMAC, 0); err == nil {
		t.Fatal("append to a closed port succeeded")
	}
}

// fakeMunger seals payloads in memory as uid, restricted as asked.
type fakeMunger struct {
	uid      int
	mu       sync.Mutex
	creds    map[string]auth.Decoded
	opened   map[string]bool
	restrict *int // forces the restriction (nil: as asked)
}

func (f *fakeMunger) Encode(_ context.Context, p []byte, restrict int, _ time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.creds == nil {
		f.creds, f.opened = map[string]auth.Decoded{}, map[string]bool{}
	}
	if f.restrict != nil {
		restrict = *f.restrict
	}
	c := fmt.Sprintf("MUNGE:%d:", len(f.creds))
	f.creds[c] = auth.Decoded{Payload: append([]byte(nil), p...), UID: f.uid, GID: f.uid, RestrictUID: restrict}
	return c, nil
}

func (f *fakeMunger) Decode(_ context.Context, c string) (auth.Decoded, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.creds[c]
	if !ok {
		return auth.Decoded{}, errors.New("invalid credential")
	}
	if f.opened[c] {
		return d, auth.ErrReplayed
	}
	f.opened[c] = true
	return d, nil
}

// TestMungeVerifier: the uid is MUNGE's; forged, replayed, unrestricted,
// foreign and stale credentials are refused.
func TestMungeVerifier(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	const relayUID = 991
	ctx := context.Background()
	v := func(m *fakeMunger) MungeVerifier {
		return MungeVerifier{Munger: m, UID: relayUID, Cluster: "lab", Now: func() time.Time { return now }}
	}
	good := func(m *fakeMunger) string {
		c, err := relayproto.Credential(ctx, m, "lab", relayUID, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("good: MUNGE's uid", func(t *testing.T) {
		m := &fakeMunger{uid: 1001}
		uid, err := v(m).Verify(ctx, good(m))
		if err != nil || uid != 1001 {
			t.Fatalf("uid %d, %v; want 1001", uid, err)
		}
	})
	seal := func(m *fakeMunger, payload string, restrict int) string {
		c, _ := m.Encode(ctx, []byte(payload), restrict, 0)
		return c
	}
	for _, tc := range []struct {
		name string
		cred func(m *fakeMunger) string
		want string
	}{
		{"garbled", func(*fakeMunger) string { return "MUNGE:AwQDAACm9n0rubbish:" }, "invalid credential"},
		{"empty", func(*fakeMunger) string { return "" }, "length 0"},
		{"huge", func(*fakeMunger) string { return strings.Repeat("A", 9<<10) }, "length"},
		{"replayed", func(m *fakeMunger) string {
			c := good(m)
			_, _ = v(m).Verify(ctx, c)
			return c
		}, "replayed"},
		{"unrestricted", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"isched-relay","cluster":"lab","issued_ms":%d}`, now.UnixMilli()), auth.NoRestriction)
		}, "restricted to uid -1"},
		{"restricted to another uid", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"isched-relay","cluster":"lab","issued_ms":%d}`, now.UnixMilli()), 0)
		}, "restricted to uid 0"},
		{"a report's start credential", func(m *fakeMunger) string {
			s, _ := auth.NewSession()
			c, _ := auth.Issue(ctx, m, s, "lab", 7, "L", relayUID, time.Minute, now)
			return c
		}, "claims"},
		{"claims a uid", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"isched-relay","cluster":"lab","issued_ms":%d,"uid":0}`, now.UnixMilli()), relayUID)
		}, "unknown field"},
		{"another purpose", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"other","cluster":"lab","issued_ms":%d}`, now.UnixMilli()), relayUID)
		}, "purpose"},
		{"another cluster", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"isched-relay","cluster":"prod","issued_ms":%d}`, now.UnixMilli()), relayUID)
		}, "cluster"},
		{"stale", func(m *fakeMunger) string {
			return seal(m, fmt.Sprintf(`{"v":1,"purpose":"isched-relay","cluster":"lab","issued_ms":%d}`, now.Add(-time.Hour).UnixMilli()), relayUID)
		}, "ago"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &fakeMunger{uid: 1002}
			uid, err := v(m).Verify(ctx, tc.cred(m))
			if !errors.Is(err, relayproto.ErrCredential) || !strings.Contains(err.Error(), tc.want) || uid != -1 {
				t.Fatalf("uid %d, err %v; want ErrCredential naming %q", uid, err, tc.want)
			}
		})
	}
}
