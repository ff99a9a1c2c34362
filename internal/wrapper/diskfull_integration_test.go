//go:build integration

package wrapper_test

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/testutil"
)

// redisSwitch is a TCP proxy to Redis that the test turns off and on: off,
// it accepts and closes at once (as a server that is down would refuse).
type redisSwitch struct {
	ln     net.Listener
	target string
	up     atomic.Bool
	wg     sync.WaitGroup
}

func newRedisSwitch(t *testing.T, target string) *redisSwitch {
	t.Helper()
	p := &redisSwitch{target: target}
	p.ln = serveProxy(t, &p.wg, func(c net.Conn) {
		if !p.up.Load() {
			_ = c.Close()
			return
		}
		p.pipe(c)
	})
	return p
}

// serveProxy listens on a loopback port and hands each connection to serve
// (in its own goroutine, counted in wg) until the test ends.
func serveProxy(t *testing.T, wg *sync.WaitGroup, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln
}

func (p *redisSwitch) pipe(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// fullFS mounts a small tmpfs and fills it: a real "no space left on device".
func fullFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0777", "isched-full", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 64k tmpfs for the disk-full test (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	_ = f.Close()
	return dir
}

// TestSpoolDiskFull: Redis is unreachable for the first 8 s of a 30 s job
// whose spool directory is on a full filesystem, with room for 10 reports
// in memory. The wrapper keeps supervising (the job ends normally at its last
// step), says the spool is unusable and that it drops samples, and once
// Redis is back delivers every start, checkpoint and end event, in order,
// once each: only samples are missing, and the samples it delivers count
// the ones it dropped.
func TestSpoolDiskFull(t *testing.T) {
	spool := fullFS(t)
	r := newRedisSwitch(t, testutil.NeedRedis(t).Addr)
	j := submitVia(t, r.ln.Addr().String(), []string{"--spool-dir", spool, "--queue-max", "10", "--report-interval", "200ms", "--interval", "200ms"},
		[]string{"--steps", "600", "--period", "0.05", "--ckpt-every", "100"}, false)
	time.Sleep(8 * time.Second)
	r.up.Store(true)
	t.Log("redis reachable")
	waitJobEnd(t, j.jobID, 90*time.Second)
	if !strings.Contains(j.output(), "fake trainer done at step 600") {
		t.Fatalf("training did not finish:\n%s", j.output())
	}

	ents := j.ingest()
	if len(ents) == 0 {
		t.Fatalf("nothing delivered after Redis came back\n%s", j.output())
	}
	count := map[report.Kind]int{}
	var last uint64
	gaps, reportedDrops := 0, 0
	for _, e := range ents {
		env, err := report.Decode(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if env.Seq <= last {
			t.Fatalf("seq %d after %d: a report delivered twice or out of order", env.Seq, last)
		}
		gaps += int(env.Seq - last - 1)
		last = env.Seq
		count[env.Kind]++
		if env.Kind == report.KindSample {
			reportedDrops += env.Sample.Dropped
		}
		if env.Kind == report.KindEnd && (env.End.ExitCode != 0 || env.End.Iters != 600) {
			t.Errorf("end %+v", env.End)
		}
	}
	t.Logf("delivered %v; %d seq gaps, %d drops counted by later samples", count, gaps, reportedDrops)
	if count[report.KindStart] != 1 || count[report.KindCheckpoint] != 6 || count[report.KindEnd] != 1 {
		t.Errorf("events delivered %v, want 1 start, 6 checkpoints, 1 end: events are never dropped", count)
	}
	// Redis is back long before the end: every drop is counted by a
	// delivered sample, and only drops leave gaps
	if gaps == 0 || reportedDrops != gaps || count[report.KindSample] == 0 {
		t.Errorf("%d samples missing, %d reported dropped: want samples dropped during the outage and said so", gaps, reportedDrops)
	}
	if ents[len(ents)-1].Payload == nil || !strings.Contains(string(ents[len(ents)-1].Payload), `"kind":"end"`) {
		t.Error("the end report is not the last")
	}
	out := j.output()
	for _, want := range []string{"report spool unavailable", "no space left on device", "report queue full: dropping oldest samples"} {
		if !strings.Contains(out, want) {
			t.Errorf("wrapper log does not say %q", want)
		}
	}
}
