package relay

import (
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/isched/isched/internal/relayproto"
)

// waitFor waits until cond holds (each check a few ms apart), failing the
// test after a generous bound that only a broken relay reaches.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestHalfSentFramesStayWithinBudget: connections that declare the largest
// frame and send only part of it (issue 26: 1 015 of them took the relay
// from 45 to 154 MB) hold only what they sent, within the per-uid and the
// total budget; those that would go over are refused, and everything lent
// is given back when the connections close.
func TestHalfSentFramesStayWithinBudget(t *testing.T) {
	e := startRelay(t, func(c *Config) {
		c.InFlightBytesPerUID = 2 * relayproto.MaxFrame
		c.InFlightBytes = 4 * relayproto.MaxFrame
	})
	b := e.srv.frames
	const part = 100_000   // of MaxFrame declared
	const lent = 128 << 10 // the buffer that holds part: 4 KiB doubled
	var conns []*rawConn
	refused, holding := map[int]int{}, 0
	for _, uid := range []int{1001, 1001, 1001, 1002, 1002, 1002, 1003, 1003, 1003} {
		r := dialRaw(t, e.addr)
		conns = append(conns, r)
		r.send(fmt.Sprintf(`{"v":1,"cred":"uid:%d"}`, uid))
		if rep, ok := r.reply(); !ok || !rep.OK {
			t.Fatalf("hello of uid %d: %+v %v", uid, rep, ok)
		}
		recv0, ref0 := b.received.Load(), b.refused.Load()
		r.sendHeader(relayproto.MaxFrame)
		_, _ = r.Write(make([]byte, part)) // may fail: the relay closes a refused one
		waitFor(t, "the relay to read the part or refuse it", func() bool {
			return b.received.Load() == recv0+part || b.refused.Load() > ref0
		})
		if b.refused.Load() > ref0 {
			refused[uid]++
		} else {
			holding++
		}
		// a refused connection gives back what it held as it closes
		waitFor(t, "the refused connection's bytes back", func() bool { total, _ := b.inFlight(); return total == int64(holding*lent) })
		b.mu.Lock()
		for key, n := range b.by {
			if n > e.cfg.InFlightBytesPerUID {
				t.Errorf("%s holds %d bytes, limit %d", key, n, e.cfg.InFlightBytesPerUID)
			}
		}
		b.mu.Unlock()
	}
	// 1001 and 1002 hold two each (their share); 1003 finds the total spent
	if want := map[int]int{1001: 1, 1002: 1, 1003: 3}; fmt.Sprint(refused) != fmt.Sprint(want) {
		t.Errorf("refused per uid %v, want %v", refused, want)
	}
	if got := counterValue(t, e.m, "isched_relay_entries_total", "verdict", relayproto.CodeBusy); got != 5 {
		t.Errorf("busy entries counted %v, want 5", got)
	}
	if got := gaugeValue(t, e.m, "isched_relay_frame_bytes_in_flight"); got != 4*lent {
		t.Errorf("in-flight gauge %v, want %d", got, 4*lent)
	}
	for _, r := range conns {
		_ = r.Close()
	}
	waitFor(t, "every lent byte back", func() bool { total, keys := b.inFlight(); return total == 0 && keys == 0 })
	// a complete frame's bytes are given back before its reply
	if _, err := e.client("uid:1003").Append(ctx5(t), "", []byte(`{"ok":1}`), testMAC, 0); err != nil {
		t.Fatalf("append once the budget is free: %v", err)
	}
	if total, keys := b.inFlight(); total != 0 || keys != 0 {
		t.Errorf("%d bytes still lent to %d keys after a complete entry", total, keys)
	}
	if got := gaugeValue(t, e.m, "isched_relay_frame_bytes_in_flight"); got != 0 {
		t.Errorf("in-flight gauge %v at the end, want 0", got)
	}
}

// gaugeValue is the gauge name's value.
func gaugeValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// BenchmarkHalfSentFrames is issue 26's probe: bob's 1 015 connections
// each declare the largest frame and send half of it. It reports the
// relay's heap per connection while they are held (after a GC), and how
// many the in-flight budget refused. Run with -benchtime=1x.
func BenchmarkHalfSentFrames(b *testing.B) {
	const n = 1015
	for b.Loop() {
		e := startRelay(b, nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			_, _ = c.Write(relayproto.AppendFrame(nil, []byte(`{"v":1,"cred":"uid:1002"}`)))
			if _, err := relayproto.ReadFrame(c, relayproto.MaxFrame); err != nil {
				b.Fatal(err)
			}
			var h [4]byte
			binary.BigEndian.PutUint32(h[:], relayproto.MaxFrame)
			_, _ = c.Write(append(h[:], make([]byte, relayproto.MaxFrame/2)...))
		}
		received := int64(-1)
		for received != e.srv.frames.received.Load() { // until the relay has read what it will
			received = e.srv.frames.received.Load()
			time.Sleep(100 * time.Millisecond)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "heap-B/conn")
		b.ReportMetric(float64(e.srv.frames.refused.Load()), "refused")
		for _, c := range conns {
			_ = c.Close()
		}
	}
}
