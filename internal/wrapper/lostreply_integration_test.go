//go:build integration

package wrapper_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/coordinator"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// replyLoser is a TCP proxy to Redis that lets the nth XADD through to the
// server and then loses its reply: it waits for Redis to apply it and
// closes the client's connection, as a Redis stopped at that moment or a
// network cut does. Every other command and connection passes untouched.
type replyLoser struct {
	ln     net.Listener
	target string
	nth    int64
	xadds  atomic.Int64
	lost   atomic.Bool
	wg     sync.WaitGroup
}

func newReplyLoser(t *testing.T, target string, nth int64) *replyLoser {
	t.Helper()
	p := &replyLoser{target: target, nth: nth}
	p.ln = serveProxy(t, &p.wg, p.pipe)
	return p
}

func (p *replyLoser) pipe(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	var muted atomic.Bool // this connection's replies are lost from now on
	done := make(chan struct{}, 2)
	go func() { // server → client
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !muted.Load() {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // client → server
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				// go-redis sends one command per write here (no pipeline)
				if k := int64(bytes.Count(bytes.ToLower(buf[:n]), []byte("\r\nxadd\r\n"))); k > 0 && p.xadds.Add(k) >= p.nth && p.lost.CompareAndSwap(false, true) {
					muted.Store(true)
					_, _ = s.Write(buf[:n])
					time.Sleep(300 * time.Millisecond) // applied by Redis by now
					return                             // closes both ends: the reply is lost
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
}

// TestLostReplyIsSentAgainAndCountedOnce: the reply to a wrapper's third
// XADD is lost after Redis applied it. The wrapper cannot know the report
// arrived and sends it again, so the real stream holds it twice, the copy
// right after the original; nothing is lost or reordered. A coordinator
// reading that stream (real Redis, real MUNGE) takes every report once and
// drops the copy as a duplicate, not as a replay attack.
func TestLostReplyIsSentAgainAndCountedOnce(t *testing.T) {
	r := testutil.NeedRedis(t)
	loser := newReplyLoser(t, r.Addr, 3)
	j := submitVia(t, loser.ln.Addr().String(), []string{"--report-interval", "200ms", "--interval", "200ms"},
		[]string{"--steps", "20", "--period", "0.05", "--ckpt-every", "10"}, true)
	if j.exitCode != 0 {
		t.Fatalf("job exit %d\n%s", j.exitCode, j.output())
	}
	if !loser.lost.Load() {
		t.Fatalf("the proxy saw %d XADDs and lost no reply\n%s", loser.xadds.Load(), j.output())
	}
	// the wire: 1..N in order, a copy only right after itself (the
	// credential and MACs are the coordinator's to check below: MUNGE
	// opens a credential once)
	ents := j.ingest()
	d := testutil.Delivered(t, ents)
	if d.Copies != 1 {
		t.Fatalf("%d copies in the stream, want 1 (the report whose reply was lost)", d.Copies)
	}
	if start, end := d.Envs[d.First[0]], d.Envs[d.First[len(d.First)-1]]; start.Kind != report.KindStart || end.Kind != report.KindEnd || end.End.ExitCode != 0 || end.End.Iters != 20 {
		t.Fatalf("first report %s, last %s %+v: want the start and the end of 20 steps", start.Kind, end.Kind, end.End)
	}

	// the coordinator's view of the same stream
	ctx := context.Background()
	st := r.Client(t, "coordinator", j.cluster)
	k := st.Keys()
	t.Cleanup(func() {
		_ = st.Del(context.Background(), k.Jobs(), k.Snapshot(), k.Leader(), k.Sessions(), k.Lineages())
	})
	// the agent's job table lists the job as this uid's (what the
	// coordinator checks a session's ownership against)
	id := mustAtoi(t, j.jobID)
	start := d.Envs[d.First[0]]
	lim := int64(5)
	jobs := report.NewEnvelope(report.KindJobs, time.Now())
	jobs.Jobs = &report.JobTable{Cluster: j.cluster, TakenMS: time.Now().UnixMilli(), Jobs: []report.Job{{JobID: id,
		User: start.Job.User, UID: os.Getuid(), State: "COMPLETED", Partition: "cpu", TimeLimitMin: &lim}}}
	b, err := report.Encode(jobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, k.Jobs(), b, 0); err != nil {
		t.Fatal(err)
	}
	m := coordinator.NewMetrics()
	c := coordinator.New(coordinator.Config{ID: "lostreply", Tick: 100 * time.Millisecond}, st, auth.ExecMunger{}, m)
	c.Start(ctx)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	counter := func(name, label, value string) float64 {
		fams, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, mt := range f.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == label && l.GetValue() == value {
						return mt.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	const reports = "isched_coordinator_reports_total"
	testutil.Eventually(t, 20*time.Second, 100*time.Millisecond, "the coordinator judged every entry", func() bool {
		return counter(reports, "verdict", "accepted")+counter(reports, "verdict", "duplicate")+counter(reports, "verdict", "rejected") >= float64(len(ents))
	})
	acc, dup, rej := counter(reports, "verdict", "accepted"), counter(reports, "verdict", "duplicate"), counter(reports, "verdict", "rejected")
	t.Logf("coordinator: %v accepted, %v duplicate, %v rejected", acc, dup, rej)
	if acc != float64(len(d.First)) || dup != 1 || rej != 0 {
		t.Errorf("coordinator: %v accepted, %v duplicates, %v rejected; want %d, 1, 0", acc, dup, rej, len(d.First))
	}
	if n := counter("isched_coordinator_reports_rejected_total", "reason", coordinator.RejectReplay); n != 0 {
		t.Errorf("%v reports refused as replays", n)
	}
}
