package wrapper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/relay"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/spool"
)

// memMunger seals credentials in memory as uid and opens each once.
type memMunger struct {
	uid   int
	mu    sync.Mutex
	creds map[string]auth.Decoded
}

func (m *memMunger) Encode(_ context.Context, p []byte, restrict int, _ time.Duration) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.creds == nil {
		m.creds = map[string]auth.Decoded{}
	}
	c := fmt.Sprintf("MUNGE:%d:", len(m.creds))
	m.creds[c] = auth.Decoded{Payload: append([]byte(nil), p...), UID: m.uid, GID: m.uid, RestrictUID: restrict}
	return c, nil
}

func (m *memMunger) Decode(_ context.Context, c string) (auth.Decoded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.creds[c]
	if !ok {
		return auth.Decoded{}, errors.New("invalid credential")
	}
	delete(m.creds, c)
	return d, nil
}

// relayedSink is the relay's Redis: it keeps what arrived, with the uid.
type relayedSink struct {
	mu   sync.Mutex
	seqs []uint64
	uids []int
	key  []byte
}

func (s *relayedSink) AppendFrom(_ context.Context, _ string, payload []byte, mac string, uid int, _ int64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := auth.Verify(s.key, payload, mac); err != nil {
		return "", err
	}
	env, err := report.Decode(payload)
	if err != nil {
		return "", err
	}
	s.seqs, s.uids = append(s.seqs, env.Seq), append(s.uids, uid)
	return fmt.Sprintf("%d-0", len(s.seqs)), nil
}

// serveRelay runs a relay on addr ("127.0.0.1:0" for any port) until the
// returned stop is called.
func serveRelay(t *testing.T, addr string, m auth.Munger, sink relay.Appender) (string, func()) {
	t.Helper()
	s, err := relay.NewServer(relay.DefaultConfig("isched:lab:ingest"), relay.MungeVerifier{Munger: m, UID: 0, Cluster: "lab"}, sink, nil, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx, ln); close(done) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestReporterThroughRelay: reports go through the relay in order, signed
// as before, under the uid MUNGE vouched for; while the relay is down they
// are spooled and delivered once it is back.
func TestReporterThroughRelay(t *testing.T) {
	sess, _ := auth.NewSession()
	m := &memMunger{uid: 1001}
	sink := &relayedSink{key: sess.Key}
	addr, stop := serveRelay(t, "127.0.0.1:0", m, sink)
	spoolPath := filepath.Join(t.TempDir(), "spool")
	out := spool.NewQueue(1000, 1<<20, spoolPath, quiet)
	job := report.JobRef{Cluster: "lab", JobID: 5, Lineage: "lab-5", User: "alice"}
	connect := RelayConnect(addr, 0, m)
	r := newReporter(job, sess, out, func(ctx context.Context) (appender, error) { return connect(ctx, job.Cluster) }, "isched:lab:ingest", quiet)
	emitKind(r, report.KindStart)
	emitKind(r, report.KindSample)
	if !r.drain(5 * time.Second) {
		t.Fatal("not delivered through the relay")
	}
	stop() // the relay goes away: reports are spooled, nothing blocks
	for range 5 {
		emitKind(r, report.KindSample)
	}
	if err := r.flush(context.Background()); err == nil {
		t.Fatal("flush succeeded with the relay down")
	}
	if fi, err := os.Stat(spoolPath); err != nil || fi.Size() == 0 {
		t.Fatalf("nothing spooled while the relay is down: %v", err)
	}
	serveRelay(t, addr, m, sink) // back on the same address
	emitKind(r, report.KindEnd)
	if !r.drain(5 * time.Second) {
		t.Fatal("not delivered after the relay came back")
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.seqs) != 8 {
		t.Fatalf("relayed seqs %v, want 1..8", sink.seqs)
	}
	for i, s := range sink.seqs {
		if s != uint64(i+1) || sink.uids[i] != 1001 {
			t.Fatalf("relayed seqs %v uids %v: want 1..8 in order, all uid 1001", sink.seqs, sink.uids)
		}
	}
}

// TestRelayOptions: --relay and ISCHED_RELAY_ADDR choose the relay; its uid
// defaults to the coordinator's.
func TestRelayOptions(t *testing.T) {
	env := map[string]string{"ISCHED_RELAY_ADDR": "relay:6395", "ISCHED_COORDINATOR_UID": "990"}
	o, err := ParseArgs([]string{"--", "true"}, func(k string) string { return env[k] }, nil)
	if err != nil || o.Relay != "relay:6395" || o.RelayUID != 990 {
		t.Fatalf("options %+v %v", o, err)
	}
	env["ISCHED_RELAY_UID"] = "991"
	if o, err = ParseArgs([]string{"--relay", "other:1", "--", "true"}, func(k string) string { return env[k] }, nil); err != nil || o.Relay != "other:1" || o.RelayUID != 991 {
		t.Fatalf("options %+v %v", o, err)
	}
	env["ISCHED_RELAY_UID"] = "-3"
	if _, err := ParseArgs([]string{"--", "true"}, func(k string) string { return env[k] }, nil); !errors.Is(err, ErrUsage) {
		t.Fatalf("ISCHED_RELAY_UID=-3: %v, want ErrUsage", err)
	}
}
