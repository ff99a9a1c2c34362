package child

// The test binary doubles as the supervised child, like Nomad's
// helper/testtask and os/exec's own tests: TestMain runs a helper mode
// instead of the tests when ISCHED_CHILD_HELPER is set, with its arguments in
// os.Args[1:].

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	envHelper = "ISCHED_CHILD_HELPER"
	// envReady names a file the helper writes its PID to once its signal
	// handling is in place, so tests never race the child's startup.
	envReady = "ISCHED_CHILD_READY"
	// envGrandchildReady is the ready file of the grandchild spawn forks.
	envGrandchildReady = "ISCHED_CHILD_GRANDCHILD_READY"
	// envSignalMap and envGrace configure the supervisor helper.
	envSignalMap = "ISCHED_CHILD_SIGNAL_MAP"
	envGrace     = "ISCHED_CHILD_GRACE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envHelper); mode != "" {
		os.Exit(helperMain(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func helperMain(mode string, args []string) int {
	arg := func(i int) string {
		if i >= len(args) {
			fmt.Fprintf(os.Stderr, "helper %s: missing argument %d\n", mode, i)
			os.Exit(2)
		}
		return args[i]
	}
	switch mode {
	case "exit":
		n, _ := strconv.Atoi(arg(0))
		return n
	case "sleep":
		d, _ := time.ParseDuration(arg(0))
		ready()
		time.Sleep(d)
		return 0
	case "sigkill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case "lines":
		n, _ := strconv.Atoi(arg(0))
		for i := range n {
			fmt.Printf("iter %d loss %.3f\n", i, 1/float64(i+1))
		}
		return 0
	case "output":
		writeIrregular(os.Stdout, testPattern("stdout"))
		writeIrregular(os.Stderr, testPattern("stderr"))
		return 0
	case "flood":
		n, _ := strconv.Atoi(arg(0))
		b := floodPattern(n)
		for len(b) > 0 {
			k := min(len(b), 32<<10)
			os.Stdout.Write(b[:k])
			b = b[k:]
		}
		return 0
	case "record":
		return record(arg(0))
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		ready()
		time.Sleep(10 * time.Minute)
		return 0
	case "spawn":
		return spawn(arg(0))
	case "tty-check":
		return ttyCheck(arg(0))
	case "tty-supervisor":
		return ttySupervisor(arg(0), arg(1))
	case "supervisor":
		return supervisor(args)
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

// helperEnv is the environment of a helper process. A race-enabled binary
// sleeps a second before exiting 0 (to let racing goroutines report); the
// helpers have nothing to report.
func helperEnv(kv ...string) []string {
	return append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), kv...)
}

// ready writes our PID to $ISCHED_CHILD_READY, atomically.
func ready() {
	if path := os.Getenv(envReady); path != "" {
		writeAtomic(path, strconv.Itoa(os.Getpid()))
	}
}

func writeAtomic(path, content string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		panic(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		panic(err)
	}
}

// record appends the name of every forwarded signal it receives to file,
// one per line, and exits 0 after SIGTERM: a training script that handles
// TERM by checkpointing and leaving.
func record(file string) int {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, forwarded...)
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 2
	}
	ready()
	for s := range ch {
		fmt.Fprintln(f, unix.SignalName(s.(syscall.Signal)))
		if s == syscall.SIGTERM {
			f.Close()
			return 0
		}
	}
	return 0
}

// spawn starts a grandchild that ignores SIGTERM (in our process group,
// as DataLoader workers are), waits until it is ready, declares itself ready
// and then, per after: ignores SIGTERM too ("ignore-term"), sleeps with the
// default SIGTERM action ("sleep"), or exits 0 at once ("exit"), orphaning
// the grandchild. With "hold-stdout" the grandchild is a plain sleeper that
// inherits our stdout, and we write a line and exit 0.
func spawn(after string) int {
	gready := os.Getenv(envGrandchildReady)
	mode, args := "ignore-term", []string(nil)
	if after == "hold-stdout" {
		mode, args = "sleep", []string{"10m"}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = helperEnv(envHelper+"="+mode, envReady+"="+gready)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for {
		if _, err := os.Stat(gready); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	switch after {
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	case "exit":
		ready()
		return 0
	case "hold-stdout":
		ready()
		fmt.Println("leader done")
		return 0
	}
	ready()
	time.Sleep(10 * time.Minute)
	return 0
}

func ttyState() string {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return fmt.Sprintf("fg=%d pgrp=%d err=%v", fg, unix.Getpgrp(), err)
}

// ttyCheck reports whether our group owns the terminal on stdin.
func ttyCheck(out string) int {
	writeAtomic(out, ttyState())
	return 0
}

// ttySupervisor runs as a session leader on a pty (as the wrapper does
// under srun --pty), starts ttyCheck with the terminal as stdin and reports
// the terminal's state after the child exited.
func ttySupervisor(childOut, out string) int {
	p, err := Start(context.Background(), Config{
		Argv:  []string{os.Args[0], childOut},
		Env:   helperEnv(envHelper + "=tty-check"),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e, err := p.Wait()
	if err != nil || e.Status() != 0 {
		fmt.Fprintln(os.Stderr, e, err)
		return 2
	}
	writeAtomic(out, fmt.Sprintf("%s foreground=%v", ttyState(), p.tty != nil))
	return 0
}

// supervisor is the wrapper in miniature: Run the helper mode in args[0]
// (with args[1:]) and exit with its status.
func supervisor(args []string) int {
	sm, err := ParseSignalMap(os.Getenv(envSignalMap))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	grace, _ := time.ParseDuration(os.Getenv(envGrace))
	e, err := Run(context.Background(), Config{
		Argv:      append([]string{os.Args[0]}, args[1:]...),
		Env:       helperEnv(envHelper + "=" + args[0]),
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Grace:     grace,
		SignalMap: sm,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, nil)
	var se *StartError
	if errors.As(err, &se) {
		return se.Code
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return e.Status()
}

// testPattern is output a training job produces: log lines, tqdm progress
// bars redrawn with \r, binary junk, and a last line without a newline.
func testPattern(stream string) []byte {
	var b []byte
	for i := range 50 {
		b = fmt.Appendf(b, "%s epoch 1 iter %d loss %.4f\n", stream, i, 1/float64(i+1))
		for pct := 0; pct <= 100; pct += 25 {
			b = fmt.Appendf(b, "\r%3d%%|%-10s| %d/100 [00:0%d<00:10, 9.5it/s]", pct, strings.Repeat("#", pct/10), pct, i%10)
		}
		b = append(b, '\n')
	}
	for i := range 40 << 10 {
		b = append(b, byte(i*7+i/251))
	}
	return append(b, "\x1b[2Kfinal partial line without newline"...)
}

// writeIrregular writes b in fewer than 100 writes of irregular sizes, so
// that reads see partial lines but the tap queue never has to drop.
func writeIrregular(f *os.File, b []byte) {
	sizes := []int{1, 7, 333, 4096, 17, 2000, 8191, 64, 3}
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), sizes[i%len(sizes)]*(1+i/len(sizes)))
		f.Write(b[:n])
		b = b[n:]
	}
}

func floodPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = "0123456789abcdef\r\n"[i%18]
	}
	return b
}
