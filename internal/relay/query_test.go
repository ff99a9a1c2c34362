package relay

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/relayproto"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
)

// fakeStore is Redis as the viewer reads it.
type fakeStore struct {
	vals  map[string][]byte
	lists map[string][][]byte
}

func (f *fakeStore) Get(_ context.Context, key string) ([]byte, error) {
	if b, ok := f.vals[key]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("get %s: %w", key, stream.ErrNotFound)
}

func (f *fakeStore) List(_ context.Context, key string) ([][]byte, error) { return f.lists[key], nil }

const (
	aliceUID = 1001
	bobUID   = 1002
)

// labRecords: alice runs lineage lab-u1001-a (job 71), bob lab-u1002-b (job
// 72); lab-squat's status says bob but its state's owner is alice; both
// have receipts and limits.
func labRecords(t *testing.T) *fakeStore {
	t.Helper()
	k, _ := stream.NewKeys("lab")
	now := time.Unix(1_800_000_000, 0)
	f := &fakeStore{vals: map[string][]byte{}, lists: map[string][][]byte{}}
	put := func(key string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		f.vals[key] = b
	}
	status := func(lineage string, job uint64, user string, uid int) report.JobStatus {
		return report.JobStatus{V: 1, Cluster: "lab", Lineage: lineage, JobID: job, User: user, UID: uid, State: "RUNNING"}
	}
	put(k.JobStatus("lab-u1001-a"), status("lab-u1001-a", 71, "alice", aliceUID))
	put(k.JobState("lab-u1001-a"), map[string]any{"owner_uid": aliceUID, "status": status("lab-u1001-a", 71, "alice", aliceUID)})
	put(k.JobStatus("lab-u1002-b"), status("lab-u1002-b", 72, "bob", bobUID))
	put(k.JobState("lab-u1002-b"), map[string]any{"owner_uid": bobUID})
	put(k.JobStatus("lab-squat"), status("lab-squat", 73, "bob", bobUID))
	put(k.JobState("lab-squat"), map[string]any{"owner_uid": aliceUID})
	f.lists[k.JobSeries("lab-u1001-a")] = [][]byte{[]byte(`{"alice":1}`)}
	f.lists[k.JobSeries("lab-u1002-b")] = [][]byte{[]byte(`{"bob":1}`)}
	jobs := report.NewEnvelope(report.KindJobs, now)
	jobs.Jobs = &report.JobTable{Cluster: "lab", TakenMS: now.UnixMilli(), Jobs: []report.Job{
		{JobID: 71, Name: "alices", User: "alice", UID: aliceUID, Partition: "gpu", State: "RUNNING"},
		{JobID: 72, Name: "bobs", User: "bob", UID: bobUID, Partition: "cpu", State: "RUNNING"},
	}}
	snap := report.NewEnvelope(report.KindSnapshot, now)
	snap.Snapshot = &report.Snapshot{Cluster: "lab", TakenMS: now.UnixMilli(), Partitions: []report.Partition{{Name: "cpu", State: "UP"}},
		Limits: []report.UserLimit{{User: "alice", Resource: "cpu", Max: 8, Used: 6, Reason: "QOSMaxCpuPerUserLimit"}, {User: "bob", Resource: "cpu", Max: 8, Used: 1, Reason: "QOSMaxCpuPerUserLimit"}}}
	for key, env := range map[string]*report.Envelope{k.Jobs(): jobs, k.Snapshot(): snap} {
		b, err := report.Encode(env)
		if err != nil {
			t.Fatal(err)
		}
		f.vals[key] = b
	}
	a, b := aliceUID, bobUID
	for _, r := range []report.Receipt{
		{Model: "m", Batch: 8, User: "alice", UID: &a, Confirmed: true, EndedMS: now.UnixMilli(), IterMS: 10},
		{Model: "secret-unconfirmed", Batch: 8, User: "alice", UID: &a, IterMS: 10},
		{Model: "m", Batch: 8, User: "bob", UID: &b, IterMS: 12},
	} {
		v, _ := json.Marshal(r)
		f.lists[k.Receipts()] = append(f.lists[k.Receipts()], v)
	}
	return f
}

// startQueryRelay starts a relay answering status queries from store
// (nil: none), with fakeVerifier's "uid:N" credentials.
func startQueryRelay(t *testing.T, store Reader) string {
	t.Helper()
	cfg := DefaultConfig("isched:lab:ingest")
	s, err := NewServer(cfg, fakeVerifier{}, &fakeRedis{}, nil, NewMetrics(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if store != nil {
		k, _ := stream.NewKeys("lab")
		names := map[int]string{aliceUID: "alice", bobUID: "bob"}
		err := s.ServeQueries(QueryConfig{Reader: store, Keys: k, SeeAll: []int{64030},
			UserName: func(uid int) (string, error) { return names[uid], nil }})
		if err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

func queryClient(t *testing.T, addr, cred string) *relayproto.QueryClient {
	c := &relayproto.QueryClient{Addr: addr, Cred: func(context.Context) (string, error) { return cred, nil }}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestStatusQueryShowsOnlyOwnLineages: bob's queries never return alice's
// lineage, job, limits or her receipts as hers; root and a SeeAll uid see
// hers.
func TestStatusQueryShowsOnlyOwnLineages(t *testing.T) {
	addr := startQueryRelay(t, labRecords(t))
	k, _ := stream.NewKeys("lab")
	bob := queryClient(t, addr, fmt.Sprintf("uid:%d", bobUID))
	ctx := ctx5(t)
	if _, err := bob.Get(ctx, k.JobStatus("lab-u1001-a")); !errors.Is(err, stream.ErrNotFound) {
		t.Errorf("bob reads alice's status: err %v, want not found", err)
	}
	if _, err := bob.Get(ctx, k.JobStatus("lab-squat")); !errors.Is(err, stream.ErrNotFound) {
		t.Errorf("bob reads a lineage whose recorded owner is alice: err %v, want not found", err)
	}
	if vals, err := bob.List(ctx, k.JobSeries("lab-u1001-a")); err != nil || len(vals) != 0 {
		t.Errorf("bob reads alice's series: %q %v", vals, err)
	}
	if b, err := bob.Get(ctx, k.JobStatus("lab-u1002-b")); err != nil || !strings.Contains(string(b), `"lineage":"lab-u1002-b"`) {
		t.Errorf("bob's own status: %s %v", b, err)
	}
	if vals, err := bob.List(ctx, k.JobSeries("lab-u1002-b")); err != nil || len(vals) != 1 {
		t.Errorf("bob's own series: %q %v", vals, err)
	}
	b, err := bob.Get(ctx, k.Jobs())
	env, derr := report.DecodeTable(b)
	if err != nil || derr != nil || len(env.Jobs.Jobs) != 1 || env.Jobs.Jobs[0].UID != bobUID {
		t.Errorf("bob's job table: %s %v %v", b, err, derr)
	}
	b, err = bob.Get(ctx, k.Snapshot())
	if err != nil || strings.Contains(string(b), "alice") || !strings.Contains(string(b), `"user":"bob"`) {
		t.Errorf("bob's snapshot: %s %v", b, err)
	}
	vals, err := bob.List(ctx, k.Receipts())
	got := string(slices.Concat(vals...))
	if err != nil || len(vals) != 2 || strings.Contains(got, "alice") || strings.Contains(got, "secret") ||
		strings.Contains(got, `"uid":1001`) || !strings.Contains(got, `"uid":-1`) {
		t.Errorf("bob's receipts: %s %v", got, err)
	}
	for _, cred := range []string{"uid:0", "uid:64030", fmt.Sprintf("uid:%d", aliceUID)} {
		c := queryClient(t, addr, cred)
		if _, err := c.Get(ctx, k.JobStatus("lab-u1001-a")); err != nil {
			t.Errorf("%s reads alice's status: %v", cred, err)
		}
	}
}

// TestStatusQueryRefusals: only the cluster's status keys are readable,
// the uid is the credential's (a frame cannot name one), and a relay
// without a reader serves no queries.
func TestStatusQueryRefusals(t *testing.T) {
	addr := startQueryRelay(t, labRecords(t))
	bob := newRawQueries(t, addr, fmt.Sprintf("uid:%d", bobUID))
	ctx := ctx5(t)
	for _, q := range []relayproto.Query{
		{Op: relayproto.OpGet, Key: "isched:lab:job:{lab-u1001-a}:state"}, {Op: relayproto.OpGet, Key: "isched:lab:coord:sessions"}, {Op: relayproto.OpGet, Key: "isched:other:jobs"},
		{Op: relayproto.OpGet, Key: "isched:lab:job:{../x}:status"}, {Op: relayproto.OpList, Key: "isched:lab:job:{lab-u1002-b}:status"}, {Op: "del", Key: "isched:lab:jobs"},
	} {
		if _, err := bob.query(ctx, q); !isQueryCode(err, relayproto.CodeBadQuery) {
			t.Errorf("%+v: %v, want %s", q, err, relayproto.CodeBadQuery)
		}
	}
	// a frame that names a uid is not a Query
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(body string) string {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = nc.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body))))
		_, _ = nc.Write([]byte(body))
		b, err := relayproto.ReadFrame(nc, relayproto.MaxQueryReply)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if r := send(fmt.Sprintf(`{"v":1,"cred":"uid:%d","mode":"query"}`, bobUID)); !strings.Contains(r, `"ok":true`) {
		t.Fatalf("hello: %s", r)
	}
	if r := send(`{"op":"get","key":"isched:lab:job:{lab-u1001-a}:status","uid":1001}`); !strings.Contains(r, relayproto.CodeBadQuery) || strings.Contains(r, "alice") {
		t.Errorf("a query naming alice's uid: %s", r)
	}
	// no reader: no queries
	none := queryClient(t, startQueryRelay(t, nil), "uid:0")
	if err := none.Connect(ctx); refusal(err) != relayproto.CodeUnsupported {
		t.Errorf("a relay without queries: %v, want %s", err, relayproto.CodeUnsupported)
	}
}

// rawQueries sends Query frames as they are (any Op) on a status
// connection authenticated with cred; its query answers like
// QueryClient's: a *relayproto.QueryRefused when the relay refused.
type rawQueries struct {
	nc net.Conn
	r  *bufio.Reader
}

func newRawQueries(t *testing.T, addr, cred string) *rawQueries {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawQueries{nc: nc, r: bufio.NewReader(nc)}
	var r relayproto.Reply
	if err := c.roundTrip(relayproto.Hello{V: relayproto.Version, Cred: cred, Mode: relayproto.ModeQuery}, &r); err != nil || !r.OK {
		t.Fatalf("hello: %+v %v", r, err)
	}
	return c
}

func (c *rawQueries) roundTrip(v, out any) error {
	b, err := relayproto.Encode(v)
	if err != nil {
		return err
	}
	_ = c.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(relayproto.AppendFrame(nil, b)); err != nil {
		return err
	}
	rb, err := relayproto.ReadFrame(c.r, relayproto.MaxQueryReply)
	if err != nil {
		return err
	}
	return relayproto.DecodeStrict(rb, out)
}

func (c *rawQueries) query(_ context.Context, q relayproto.Query) (relayproto.QueryReply, error) {
	var r relayproto.QueryReply
	if err := c.roundTrip(q, &r); err != nil {
		return r, err
	}
	if !r.OK {
		return r, &relayproto.QueryRefused{Code: r.Code, Err: r.Err}
	}
	return r, nil
}

func isQueryCode(err error, code string) bool {
	var r *relayproto.QueryRefused
	return errors.As(err, &r) && r.Code == code
}
