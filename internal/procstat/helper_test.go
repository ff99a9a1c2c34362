package procstat

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests sample real process trees made of this test binary, re-executed
// with helperEnv set (the way Go's os/exec tests and Nomad's testtask do).
// Processes are started with os.StartProcess: os/exec belongs to
// internal/child and internal/slurm.
//
// A helper's arguments describe its subtree:
//
//	MB [N CHILDARGS...]
//
// allocates and touches MB mebibytes, then starts N children with CHILDARGS.
// MB may be "busy" (no memory, spin on a CPU) or "churn" (keep starting
// short-lived children). A helper prints "ready PID..." (its own PID and those
// of all its descendants) once every descendant is ready, then obeys lines on
// stdin: "free" unmaps its memory and answers "freed". On stdin EOF it closes
// its children's stdin, waits for them and exits, so a dying test takes its
// trees with it.
const helperEnv = "ISCHED_PROCSTAT_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no arguments")
		return 2
	}
	var mem []byte
	busy, churn := false, false
	switch args[0] {
	case "sleepms":
		// The churn helper's children: no protocol, sleep and exit.
		ms := 0
		if len(args) > 1 {
			ms, _ = strconv.Atoi(args[1])
		}
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return 0
	case "busy":
		busy = true
	case "churn":
		churn = true
	default:
		mb, err := strconv.Atoi(args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		if mb > 0 {
			// MAP_POPULATE faults the pages in from the kernel: touching
			// them from Go would, under -race, also fault in shadow memory
			// and blur the RSS the test expects.
			mem, err = syscall.Mmap(-1, 0, mb<<20, syscall.PROT_READ|syscall.PROT_WRITE,
				syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_POPULATE)
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper: mmap:", err)
				return 1
			}
		}
	}
	pids := []string{strconv.Itoa(os.Getpid())}
	var kids []*helper
	if len(args) >= 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 2
		}
		for range n {
			k, err := startHelper(args[2:])
			if err != nil {
				fmt.Fprintln(os.Stderr, "helper:", err)
				return 1
			}
			kids = append(kids, k)
			go k.wait() // reap a child as soon as it dies, as a real parent would
			for _, p := range k.pids {
				pids = append(pids, strconv.Itoa(int(p)))
			}
		}
	}
	if busy {
		go func() {
			for x := 0; ; x++ {
				_ = x
			}
		}()
	}
	stop := make(chan struct{})
	var churnDone sync.WaitGroup
	if churn {
		churnDone.Add(1)
		go func() {
			defer churnDone.Done()
			churnLoop(stop)
		}()
	}
	fmt.Println("ready " + strings.Join(pids, " "))

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "free" && mem != nil {
			if err := syscall.Munmap(mem); err != nil {
				fmt.Fprintln(os.Stderr, "helper: munmap:", err)
				return 1
			}
			mem = nil
			fmt.Println("freed")
		}
	}
	close(stop)
	churnDone.Wait()
	for _, k := range kids {
		k.stop()
	}
	return 0
}

// churnLoop keeps up to four short-lived children alive: each exits after
// 0-30ms, and a new one is started as soon as one is reaped.
func churnLoop(stop <-chan struct{}) {
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return
		case sem <- struct{}{}:
		}
		p, err := spawn([]string{"sleepms", strconv.Itoa(rand.IntN(30))}, nil, nil)
		if err != nil {
			<-sem
			time.Sleep(10 * time.Millisecond)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Wait()
			<-sem
		}()
	}
}

// helper is a running helper subtree.
type helper struct {
	proc  *os.Process
	stdin io.WriteCloser
	out   *bufio.Reader
	pids  []int32 // the helper first, then its descendants

	waitOnce sync.Once
	exited   chan struct{} // closed once reaped
}

// spawn starts the test binary as a helper with the given stdin and stdout.
func spawn(args []string, stdin, stdout *os.File) (*os.Process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devnull.Close()
	if stdin == nil {
		stdin = devnull
	}
	if stdout == nil {
		stdout = devnull
	}
	env := append(os.Environ(), helperEnv+"=1")
	return os.StartProcess(exe, append([]string{exe}, args...), &os.ProcAttr{
		Env:   env,
		Files: []*os.File{stdin, stdout, os.Stderr},
	})
}

// startHelper starts a helper subtree and waits until it is ready.
func startHelper(args []string) (*helper, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p, err := spawn(args, inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	h := &helper{proc: p, stdin: inW, out: bufio.NewReader(outR), exited: make(chan struct{})}
	line, err := h.out.ReadString('\n')
	if err != nil {
		h.stop()
		return nil, fmt.Errorf("helper %v: no ready line: %w", args, err)
	}
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "ready" {
		h.stop()
		return nil, fmt.Errorf("helper %v: bad ready line %q", args, line)
	}
	for _, s := range f[1:] {
		v, err := strconv.Atoi(s)
		if err != nil {
			h.stop()
			return nil, fmt.Errorf("helper %v: bad ready line %q", args, line)
		}
		h.pids = append(h.pids, int32(v))
	}
	return h, nil
}

// wait reaps the helper; it may be called many times, from any goroutine.
func (h *helper) wait() {
	h.waitOnce.Do(func() {
		h.proc.Wait()
		close(h.exited)
	})
}

// stop closes the helper's stdin, which ends its subtree, and reaps it.
func (h *helper) stop() {
	h.stdin.Close()
	go h.wait()
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		h.proc.Kill()
		<-h.exited
	}
}

// command sends a line to the helper and waits for the answer line.
func (h *helper) command(cmd string) (string, error) {
	if _, err := io.WriteString(h.stdin, cmd+"\n"); err != nil {
		return "", err
	}
	line, err := h.out.ReadString('\n')
	return strings.TrimSpace(line), err
}

// runHelper starts a helper subtree for the test and stops it at cleanup.
func runHelper(tb testing.TB, args ...string) *helper {
	tb.Helper()
	h, err := startHelper(args)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.stop)
	return h
}
