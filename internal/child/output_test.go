package child

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tapRecorder collects what a tap sees.
type tapRecorder struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	calls int
	gaps  int
}

func (r *tapRecorder) tap(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b == nil {
		r.gaps++
		return
	}
	r.calls++
	r.buf.Write(b)
}

func (r *tapRecorder) snapshot() (data []byte, calls, gaps int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes()), r.calls, r.gaps
}

// syncBuffer is an output that can be read while the copy writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func TestOutputPassThrough(t *testing.T) {
	t.Parallel()
	wantOut, wantErr := testPattern("stdout"), testPattern("stderr")
	tests := []struct {
		name string
		// file: outputs are *os.File rather than buffers.
		file bool
		tap  bool
	}{
		{"file without tap is handed over", true, false},
		{"file with tap", true, true},
		{"buffer with tap", false, true},
		{"buffer without tap", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := helper(t, "output")
			var outs [2]io.Writer
			read := [2]func() []byte{}
			for i := range outs {
				if tt.file {
					f, err := os.Create(filepath.Join(t.TempDir(), "out"))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { f.Close() })
					outs[i] = f
					read[i] = func() []byte { b, _ := os.ReadFile(f.Name()); return b }
				} else {
					var b bytes.Buffer
					outs[i] = &b
					read[i] = b.Bytes
				}
			}
			cfg.Stdout, cfg.Stderr = outs[0], outs[1]
			var taps [2]tapRecorder
			if tt.tap {
				cfg.StdoutTap, cfg.StderrTap = taps[0].tap, taps[1].tap
			}
			p := start(t, cfg)
			if tt.file && !tt.tap && (p.outs[0] != nil || p.outs[1] != nil) {
				t.Errorf("output files were piped and copied instead of handed to the child")
			}
			if e := wait(t, p); e.Status() != 0 {
				t.Fatalf("child: %v", e)
			}
			for i, want := range [][]byte{wantOut, wantErr} {
				if got := read[i](); !bytes.Equal(got, want) {
					t.Errorf("output %d: %d bytes, want %d identical bytes", i, len(got), len(want))
				}
				if !tt.tap {
					continue
				}
				got, _, gaps := taps[i].snapshot()
				if !bytes.Equal(got, want) || gaps != 0 {
					t.Errorf("tap %d saw %d bytes with %d gaps, want the %d bytes of the output", i, len(got), gaps, len(want))
				}
			}
			if o, e := p.tapDropped(); o != 0 || e != 0 {
				t.Errorf("tapDropped() = %d, %d, want 0, 0", o, e)
			}
		})
	}

	// As with os/exec, one writer for both streams is written by one
	// goroutine at a time (the race detector checks).
	t.Run("one buffer for both", func(t *testing.T) {
		t.Parallel()
		cfg, _ := helper(t, "output")
		var b bytes.Buffer
		cfg.Stdout, cfg.Stderr = &b, &b
		wait(t, start(t, cfg))
		if b.Len() != len(wantOut)+len(wantErr) {
			t.Errorf("got %d bytes, want %d", b.Len(), len(wantOut)+len(wantErr))
		}
	})

	t.Run("nil output with tap", func(t *testing.T) {
		t.Parallel()
		cfg, _ := helper(t, "lines", "1000")
		var tap tapRecorder
		cfg.StdoutTap = tap.tap
		p := start(t, cfg)
		wait(t, p)
		got, _, _ := tap.snapshot()
		var want bytes.Buffer
		for i := range 1000 {
			fmt.Fprintf(&want, "iter %d loss %.3f\n", i, 1/float64(i+1))
		}
		// a tap may lag on a loaded machine and lose chunks, by design;
		// what it saw plus what was dropped is the whole output
		dropped, _ := p.tapDropped()
		if int64(len(got))+dropped != int64(want.Len()) {
			t.Errorf("tap saw %d bytes, %d dropped, want %d in all", len(got), dropped, want.Len())
		}
		if dropped == 0 && !bytes.Equal(got, want.Bytes()) {
			t.Errorf("tap saw %d bytes unlike the output", len(got))
		}
	})
}

// A tap that stops dead must not hold back the job's output nor Wait.
func TestSlowTap(t *testing.T) {
	t.Parallel()
	const size = 16 << 20 // twice what the tap queue holds at most
	cfg, _ := helper(t, "flood", strconv.Itoa(size))
	var out syncBuffer
	release := make(chan struct{})
	var tap tapRecorder
	cfg.Stdout = &out
	cfg.StdoutTap = func(b []byte) {
		<-release
		tap.tap(b)
	}
	cfg.WaitDelay = 200 * time.Millisecond
	p := start(t, cfg)
	defer close(release)
	waitFor(t, "output to pass the blocked tap", func() bool { return out.Len() == size })
	e := wait(t, p)
	if e.Status() != 0 {
		t.Fatalf("child: %v", e)
	}
	if !bytes.Equal(out.Bytes(), floodPattern(size)) {
		t.Errorf("output differs from what the child wrote")
	}
	if dropped, _ := p.tapDropped(); dropped == 0 {
		t.Errorf("tapDropped() = 0, want the bytes the blocked tap could not take")
	}
}

// scriptedReader hands out the chunks sent to it, one per Read.
type scriptedReader chan []byte

func (r scriptedReader) Read(b []byte) (int, error) {
	c, ok := <-r
	if !ok {
		return 0, io.EOF
	}
	return copy(b, c), nil
}

func (r scriptedReader) Close() error { return nil }

// After chunks were dropped, the tap is told (a nil call) before the next
// chunk it gets, and every byte is either tapped or counted as dropped.
func TestTapGap(t *testing.T) {
	t.Parallel()
	r := make(scriptedReader)
	var out bytes.Buffer
	release, entered := make(chan struct{}), make(chan struct{})
	var tap tapRecorder
	first := true
	tee := newTee("stdout", r, &out, func(b []byte) {
		if first {
			first = false
			close(entered)
			<-release
		}
		tap.tap(b)
	}, slog.New(slog.DiscardHandler))
	tee.start()

	var want []byte
	send := func(s string) {
		r <- []byte(s)
		want = append(want, s...)
	}
	// One chunk blocks the tap, tapQueue fill the queue, the rest drop.
	send("x")
	<-entered
	for range tapQueue + 10 {
		send("x")
	}
	waitFor(t, "chunks to be dropped", func() bool { return tee.dropped.Load() == 10 })
	close(release)
	waitFor(t, "tap to catch up", func() bool { _, calls, _ := tap.snapshot(); return calls == 1+tapQueue })
	send("after the gap\n")
	close(r)
	tee.drain(time.Now().Add(patience))

	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("output %q, want %q", out.Bytes(), want)
	}
	got, calls, gaps := tap.snapshot()
	if gaps != 1 || !bytes.HasSuffix(got, []byte("x"+"after the gap\n")) || calls != 2+tapQueue {
		t.Errorf("tap: %d calls, %d gaps, ends %q; want %d calls, 1 gap, ending with the chunk after it", calls, gaps, got[max(0, len(got)-20):], 2+tapQueue)
	}
	if d := tee.dropped.Load(); int(d)+len(got) != len(want) {
		t.Errorf("tapped %d + dropped %d bytes != %d written", len(got), d, len(want))
	}
}

// A grandchild that inherited the stdout pipe and outlives the leader must
// not keep Wait from returning.
func TestWaitDelay(t *testing.T) {
	t.Parallel()
	cfg, readyFile := helper(t, "spawn", "hold-stdout")
	gready := filepath.Join(t.TempDir(), "grandchild-ready")
	cfg.Env = append(cfg.Env, envGrandchildReady+"="+gready)
	var out syncBuffer
	cfg.Stdout = &out
	cfg.WaitDelay = 300 * time.Millisecond
	p := start(t, cfg)
	waitPID(t, readyFile)
	gpid := waitPID(t, gready)
	t.Cleanup(func() { unix.Kill(gpid, syscall.SIGKILL) })
	if e := wait(t, p); e.Status() != 0 {
		t.Errorf("child: %v", e)
	}
	if got := string(out.Bytes()); got != "leader done\n" {
		t.Errorf("output %q, want %q", got, "leader done\n")
	}
	if gone(gpid) {
		t.Errorf("grandchild was killed; only the pipe should have been closed")
	}
}

// tapDropped reports how many bytes were dropped for the stdout and stderr
// taps because they lagged behind.
func (p *Process) tapDropped() (stdout, stderr int64) {
	if t := p.outs[0]; t != nil {
		stdout = t.dropped.Load()
	}
	if t := p.outs[1]; t != nil {
		stderr = t.dropped.Load()
	}
	return stdout, stderr
}
