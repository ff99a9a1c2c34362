// Command ingest benchmarks the coordinator's ingest path: N simulated
// isched-wrappers (real MUNGE credentials, HMAC-signed samples every 5 s,
// appended as the `reporter` user) against the real Redis, a real
// isched-coordinator process and (-agent real, the default) a real
// isched-agent whose Slurm commands are scripts/bench/fakeslurm, for
// N = 1k, 5k, 10k by default. -soak judges memory growth over a long run
// (make soak, make soak-ci). See scripts/bench/internal/bench for what is
// simulated and how latency is measured.
//
//	go run ./scripts/bench/ingest -jobs 1000,5000,10000 -duration 60s
//
// It prints figures (reports/s, decision latency p50/p99, coordinator and
// agent RSS and CPU, Slurm commands per minute, lost reports, Redis memory
// per job) and says plainly when a target is missed
// (10k jobs: p99 < 1 s, coordinator RSS < 1 GB). Every run uses a cluster
// name of its own and deletes its keys at the end.
//
// This is a benchmark harness, not a product binary: it runs `go build` and
// the coordinator itself with os/exec (the product's own exec stays in
// internal/slurm and internal/child).
package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/isched/isched/internal/auth"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/isched/isched/scripts/bench/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	jobs                       []int
	duration, settle, every    time.Duration
	iters, probes, aged, agedI int
	gpus, workers              int
	coordinator, jsonOut       string
	keep                       bool
	logLevel                   string
	agent, agentBin, testdata  string
	soak                       bool
	soakEvery, warmUp          time.Duration
	pprof                      bool
	redisAddr                  string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	jobs := fs.String("jobs", "1000,5000,10000", "simulated wrappers per run, comma-separated (one run each)")
	fs.DurationVar(&o.duration, "duration", time.Minute, "measured window of each run")
	fs.DurationVar(&o.settle, "settle", 10*time.Second, "wait between the last batch of starts and the window")
	fs.DurationVar(&o.every, "every", 5*time.Second, "sample interval of each wrapper (the wrapper's --report-interval)")
	fs.IntVar(&o.iters, "iters", 5, "iterations per sample (5 per 5 s: 1 s iterations)")
	fs.IntVar(&o.probes, "probes", 200, "jobs whose decision latency is measured")
	fs.IntVar(&o.aged, "aged", 4, "jobs that report -aged-iters iterations per sample, to show a job's footprint at the caps")
	fs.IntVar(&o.agedI, "aged-iters", 350, "iterations per sample of the aged jobs")
	fs.IntVar(&o.gpus, "gpus", 1, "GPU devices per sample (0: CPU jobs)")
	fs.IntVar(&o.workers, "issue-workers", 4, "concurrent munge commands when making credentials")
	fs.StringVar(&o.coordinator, "coordinator", "", "isched-coordinator binary (default: go build ./coordinator)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's Redis keys (default: delete them)")
	fs.StringVar(&o.logLevel, "log-level", "info", "progress log level (stderr)")
	fs.StringVar(&o.agent, "agent", "real", "real: a real isched-agent against fake Slurm commands serving the simulated jobs; sim: the generator writes the agent's keys")
	fs.StringVar(&o.agentBin, "agent-bin", "", "isched-agent binary with -agent real (default: go build ./agent)")
	fs.StringVar(&o.testdata, "slurm-testdata", "internal/slurm/testdata/22.05", "captured Slurm output the fake Slurm serves")
	fs.BoolVar(&o.soak, "soak", false, "soak: sample memory through the window and fail if it grows by more than 5% after the warm-up (defaults: -jobs 1000 -duration 2h -aged 0)")
	fs.DurationVar(&o.soakEvery, "soak-every", 0, "soak sample interval (default: duration/40, at least 5s)")
	fs.DurationVar(&o.warmUp, "warm-up", 0, "soak warm-up left out of the verdict (default: a quarter of the duration)")
	fs.BoolVar(&o.pprof, "pprof", false, "run the coordinator and a real agent with -pprof-listen on a free loopback port (logged at start)")
	fs.StringVar(&o.redisAddr, "redis-addr", "", "Redis address for every client and daemon of the run (sets ISCHED_REDIS_ADDR); a comma-separated list of masters is a Redis Cluster, e.g. 127.0.0.1:6391,127.0.0.1:6392,127.0.0.1:6393 (scripts/dev-cluster up --redis-cluster)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := labRedisEnv(o.redisAddr); err != nil {
		fmt.Fprintf(stderr, "ingest: %v\n", err)
		return 2
	}
	if o.agent != "real" && o.agent != "sim" {
		fmt.Fprintf(stderr, "ingest: -agent %q: want real or sim\n", o.agent)
		return 2
	}
	if o.soak {
		if !set["jobs"] {
			*jobs = "1000"
		}
		if !set["duration"] {
			o.duration = 2 * time.Hour
		}
		if !set["aged"] {
			o.aged = 0
		}
		if o.soakEvery <= 0 {
			o.soakEvery = max(o.duration/40, 5*time.Second)
		}
		if o.warmUp <= 0 {
			o.warmUp = o.duration / 4
		}
		o.pprof = true // the live heap after a forced collection is sampled through it
	}
	for _, f := range strings.Split(*jobs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "ingest: -jobs %q: want positive numbers\n", *jobs)
			return 2
		}
		o.jobs = append(o.jobs, n)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		fmt.Fprintf(stderr, "ingest: -log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := bench1(ctx, o, log, stdout); err != nil {
		fmt.Fprintf(stderr, "ingest: %v\n", err)
		return 1
	}
	return 0
}

func bench1(ctx context.Context, o options, log *slog.Logger, stdout io.Writer) error {
	tmp, err := os.MkdirTemp("", "isched-bench-ingest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := o.coordinator
	if bin == "" {
		bin = filepath.Join(tmp, "isched-coordinator")
		log.Info("building the coordinator", "out", bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./coordinator")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./coordinator (run from the repository root): %w", err)
		}
	}
	agentBin := o.agentBin
	fake := ""
	if o.agent == "real" {
		if agentBin == "" {
			agentBin = filepath.Join(tmp, "isched-agent")
			if err := goBuild(ctx, agentBin, "./agent", log); err != nil {
				return err
			}
		}
		fake = filepath.Join(tmp, "fakeslurm")
		if err := goBuild(ctx, fake, "./scripts/bench/fakeslurm", log); err != nil {
			return err
		}
	}
	me, err := user.Current()
	if err != nil {
		return err
	}
	failed := false
	var results []*bench.Result
	var names []string
	for _, n := range o.jobs {
		cluster := fmt.Sprintf("bench%d-%d", os.Getpid(), n)
		res, err := runOne(ctx, o, n, cluster, bin, agentBin, fake, tmp, me, log)
		if err != nil {
			return fmt.Errorf("%d jobs: %w", n, err)
		}
		results = append(results, res)
		names = append(names, cluster)
		printResult(stdout, res)
		if !printSoak(stdout, res, o.warmUp) {
			failed = true
		}
	}
	printSummary(stdout, results)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(struct {
			Host     string          `json:"host"`
			Date     string          `json:"date"`
			Clusters []string        `json:"clusters"`
			Results  []*bench.Result `json:"results"`
		}{hostname(), time.Now().Format(time.RFC3339), names, results}, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if failed {
		return errors.New("soak: memory grew by more than 5% after the warm-up")
	}
	return nil
}

func goBuild(ctx context.Context, out, pkg string, log *slog.Logger) error {
	log.Info("building", "pkg", pkg, "out", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s (run from the repository root): %w", pkg, err)
	}
	return nil
}

func hostname() string { h, _ := os.Hostname(); return h }

// labRedisEnv sets what the run's daemons inherit and stream.ConfigFromEnv
// reads for its own clients: the Redis address (addr, else
// ISCHED_REDIS_ADDR, else the dev lab's 127.0.0.1:6390) and the password
// directory (else the dev lab's). The bench runs on the lab; isched
// itself has no built-in address.
func labRedisEnv(addr string) error {
	if addr == "" {
		addr = cmp.Or(os.Getenv("ISCHED_REDIS_ADDR"), "127.0.0.1:6390")
	}
	dir := cmp.Or(os.Getenv("ISCHED_REDIS_PASSWORD_DIR"), filepath.Join(cmp.Or(os.Getenv("ISCHED_DEV_DIR"), "/var/lib/isched-dev"), "redis"))
	for k, v := range map[string]string{"ISCHED_REDIS_ADDR": addr, "ISCHED_REDIS_PASSWORD_DIR": dir} {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

// redisEnv hides the user variables so that each client gets the user it asks for.
func redisEnv(k string) string {
	switch k {
	case "ISCHED_REDIS_USER", "ISCHED_REDIS_PASSWORD_FILE":
		return ""
	}
	return os.Getenv(k)
}

func open(ctx context.Context, user, cluster string) (*stream.Client, error) {
	cfg, err := stream.ConfigFromEnv(func(k string) string {
		if k == "ISCHED_CLUSTER" {
			return cluster
		}
		return redisEnv(k)
	}, user)
	if err != nil {
		return nil, err
	}
	cfg.Cluster = cluster
	return stream.Open(ctx, cfg)
}

func runOne(ctx context.Context, o options, n int, cluster, bin, agentBin, fake, tmp string, me *user.User, log *slog.Logger) (*bench.Result, error) {
	log = log.With("jobs", n, "cluster", cluster)
	clients := map[string]*stream.Client{}
	for _, u := range []string{"reporter", "agent", "admin"} {
		c, err := open(ctx, u, cluster)
		if err != nil {
			return nil, fmt.Errorf("redis as %s: %w", u, err)
		}
		defer c.Close()
		clients[u] = c
	}
	uid, _ := strconv.Atoi(me.Uid)
	coord, err := startCoordinator(ctx, bin, cluster, filepath.Join(tmp, cluster+".log"), o.pprof, log)
	pprofBase := ""
	if o.pprof && err == nil {
		pprofBase = "http://" + coord.pprof + "/debug/pprof"
	}
	if err != nil {
		return nil, err
	}
	stopped := false
	stopCoord := func() {
		if !stopped {
			stopped = true
			coord.stop(log)
		}
	}
	defer stopCoord()
	var agent *proc
	var fs *bench.FakeSlurm
	agentPprof := ""
	if o.agent == "real" {
		dir := filepath.Join(tmp, cluster+"-slurm")
		if fs, err = newFakeSlurm(dir, fake, o.testdata); err != nil {
			return nil, err
		}
		args := []string{"-cluster", cluster, "-slurm-bin-dir", dir, "-poll", "5s", "-log-level", "info"}
		if o.pprof {
			args = append(args, "-pprof-listen", "127.0.0.1:0")
		}
		agent, err = startProc(ctx, agentBin, args,
			map[string]string{"ISCHED_CLUSTER": cluster, "ISCHED_REDIS_USER": "agent"}, filepath.Join(tmp, cluster+"-agent.log"), "started", log)
		if err != nil {
			return nil, err
		}
		defer agent.stop(log)
		if o.pprof { // logged before "started"
			if agentPprof = agent.listenAddr("pprof"); agentPprof == "" {
				return nil, errors.New("isched-agent -pprof-listen logged no address")
			}
			log.Info("agent pprof", "listen", agentPprof)
		}
	}
	cfg := bench.Config{Cluster: cluster, Jobs: n, Duration: o.duration, Settle: o.settle, Every: o.every,
		Iters: o.iters, Probes: o.probes, Aged: o.aged, AgedIters: o.agedI, GPUs: o.gpus, UID: uid, User: me.Username,
		CoordinatorUID: os.Getuid(), IssueWorkers: o.workers, Seed: uint64(n),
		Munger: auth.ExecMunger{}, Reporter: clients["reporter"], Agent: clients["agent"], Admin: clients["admin"],
		Observer: bench.HTTPObserver{URL: "http://" + coord.metrics + "/metrics", PID: coord.cmd.Process.Pid, Pprof: pprofBase},
		RedisPID: redisPID(), Log: log, SoakEvery: o.soakEvery, WarmUp: o.warmUp}
	if agent != nil {
		cfg.Agent, cfg.Slurm = nil, fs
		cfg.AgentProc = func() (bench.Proc, error) { return bench.ReadProc(agent.cmd.Process.Pid) }
		if agentPprof != "" {
			cfg.AgentHeap = bench.HTTPObserver{Pprof: "http://" + agentPprof + "/debug/pprof"}.LiveHeap
		}
	}
	b, err := bench.New(cfg)
	if err != nil {
		return nil, err
	}
	res, runErr := b.Run(ctx)
	stopCoord()
	if res != nil {
		res.CoordLogWarnings = coord.warnings()
	}
	if agent != nil {
		agent.stop(log)
		if res != nil {
			for k, v := range agent.warnings() {
				res.CoordLogWarnings["agent "+k] = v
			}
		}
	}
	if !o.keep {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := b.Cleanup(cctx); err != nil {
			log.Warn("keys not deleted", "err", err, "pattern", "isched:"+cluster+":*")
		}
	}
	if runErr != nil {
		coord.tail(log)
		if agent != nil {
			agent.tail(log)
		}
		return nil, runErr
	}
	return res, nil
}

// redisPID is the dev cluster's single redis-server, whose CPU and RSS
// the results show; 0 (none shown) when the run is on a Redis Cluster.
func redisPID() int {
	if strings.Contains(os.Getenv("ISCHED_REDIS_ADDR"), ",") {
		return 0
	}
	dir := os.Getenv("ISCHED_DEV_DIR")
	if dir == "" {
		dir = "/var/lib/isched-dev"
	}
	b, err := os.ReadFile(filepath.Join(dir, "redis", "run", "redis.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// proc is a process under test (the coordinator, the agent): our child,
// logging JSON to a file.
type proc = coordProc

type coordProc struct {
	cmd     *exec.Cmd
	log     string
	metrics string
	pprof   string // with profiling: where /debug/pprof/ is served
	done    chan struct{}
}

// startCoordinator runs isched-coordinator as the `coordinator` Redis user
// on the run's cluster, with /metrics (and with profiling /debug/pprof/)
// on a free port it reports in its log.
func startCoordinator(ctx context.Context, bin, cluster, logPath string, profiling bool, log *slog.Logger) (*coordProc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	args := []string{"-metrics-listen", "127.0.0.1:0", "-log-level", "info"}
	if profiling {
		args = append(args, "-pprof-listen", "127.0.0.1:0")
	}
	cmd := exec.Command(bin, args...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ISCHED_REDIS_USER=") && !strings.HasPrefix(kv, "ISCHED_REDIS_PASSWORD_FILE=") &&
			!strings.HasPrefix(kv, "ISCHED_CLUSTER=") && !strings.HasPrefix(kv, "ISCHED_COORDINATOR_CONFIG=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "ISCHED_CLUSTER="+cluster, "ISCHED_REDIS_USER=coordinator")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &coordProc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for p.metrics == "" || profiling && p.pprof == "" {
		select {
		case <-p.done:
			p.tail(log)
			return nil, fmt.Errorf("isched-coordinator exited at start (%s)", cmd.ProcessState)
		case <-ctx.Done():
			p.stop(log)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		p.metrics = p.listenAddr("metrics")
		if profiling {
			p.pprof = p.listenAddr("pprof")
		}
		if time.Now().After(deadline) {
			p.stop(log)
			return nil, errors.New("isched-coordinator did not report its metrics (and pprof) address within 15s")
		}
	}
	log.Info("coordinator started", "pid", cmd.Process.Pid, "metrics", p.metrics, "pprof", p.pprof, "log", logPath)
	return p, nil
}

// newFakeSlurm makes dir the fake Slurm's: the fakeslurm binary (hard
// linked: it finds its data beside its own path) under each command's name,
// and the captured output it serves.
func newFakeSlurm(dir, fake, testdata string) (*bench.FakeSlurm, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Link(fake, filepath.Join(dir, "fakeslurm")); err != nil {
		return nil, err
	}
	for _, name := range []string{"squeue", "sinfo", "scontrol", "scancel", "sbatch"} {
		if err := os.Symlink("fakeslurm", filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return bench.NewFakeSlurm(dir, testdata)
}

// startProc runs bin with the Redis user variables of env replacing ours,
// and waits for the log record readyMsg.
func startProc(ctx context.Context, bin string, args []string, env map[string]string, logPath, readyMsg string, log *slog.Logger) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "ISCHED_REDIS_USER" && k != "ISCHED_REDIS_PASSWORD_FILE" && k != "ISCHED_CLUSTER" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for ready := false; !ready; {
		select {
		case <-p.done:
			p.tail(log)
			return nil, fmt.Errorf("%s exited at start (%s)", filepath.Base(bin), cmd.ProcessState)
		case <-ctx.Done():
			p.stop(log)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		p.scan(func(rec map[string]any) { ready = ready || rec["msg"] == readyMsg })
		if !ready && time.Now().After(deadline) {
			p.stop(log)
			return nil, fmt.Errorf("%s did not log %q within 15s", filepath.Base(bin), readyMsg)
		}
	}
	log.Info("started", "bin", filepath.Base(bin), "pid", cmd.Process.Pid, "log", logPath)
	return p, nil
}

// scan calls f for each JSON log record of the coordinator.
func (p *coordProc) scan(f func(map[string]any)) {
	fh, err := os.Open(p.log)
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			f(rec)
		}
	}
}

// listenAddr is the "listen" address of the process's last log record
// msg ("" until it logged one): where it serves on a port it chose.
func (p *coordProc) listenAddr(msg string) string {
	addr := ""
	p.scan(func(rec map[string]any) {
		if rec["msg"] == msg {
			addr, _ = rec["listen"].(string)
		}
	})
	return addr
}

// warnings counts the coordinator's WARN and ERROR log records by message.
func (p *coordProc) warnings() map[string]int {
	out := map[string]int{}
	p.scan(func(rec map[string]any) {
		if l, _ := rec["level"].(string); l == "WARN" || l == "ERROR" {
			msg, _ := rec["msg"].(string)
			out[l+": "+msg]++
		}
	})
	return out
}

func (p *coordProc) tail(log *slog.Logger) {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines[max(len(lines)-10, 0):] {
		log.Warn("coordinator log", "line", l)
	}
}

// stop sends SIGTERM to the coordinator (our child) and SIGKILL after 15 s.
func (p *coordProc) stop(log *slog.Logger) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		log.Warn("coordinator did not stop on SIGTERM; killing it", "pid", p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/(1<<10)) }

// ms prints a latency; updated_ms has a resolution of 1 ms, so below it
// only "<1 ms" is honest.
func ms(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "missed"
	case v < 1:
		return "<1 ms"
	}
	return fmt.Sprintf("%.0f ms", v)
}

func printResult(w io.Writer, r *bench.Result) {
	fmt.Fprintf(w, "\n== %d simulated wrappers (+%d aged), a sample every %s with %d iterations; window %s ==\n",
		r.Jobs, r.Aged, r.Every, r.Iters, r.Window.Round(time.Second))
	fmt.Fprintf(w, "ramp: %s to start every job in job-table-sized batches of <= %d (MUNGE credentials: %s of it)\n",
		r.Ramp.Round(time.Second), r.TableCapacity, r.CredIssue.Round(time.Millisecond))
	fmt.Fprintf(w, "job table: one envelope holds %d of these jobs; all %d take %s (max %s)\n",
		r.TableCapacity, r.Jobs+r.Aged, kib(float64(r.TableBytesNeeded)), mib(float64(report.MaxTablePayload)))
	fmt.Fprintf(w, "reports/s: offered %.0f, accepted %.0f (rejected in window: %.0f); backlog at the end of the window: %.0f reports; drained in %s\n",
		r.Offered, r.Accepted, r.RejectedInWindow, r.Backlog, drain(r.Drain))
	l := r.Latency
	fmt.Fprintf(w, "decision latency (XADD -> coordinator saved the state with it), %d probe samples: p50 %s, p90 %s, p99 %s, max %s",
		l.N+l.Missed, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max))
	fmt.Fprintf(w, " (missed >60s: %d, upper bounds: %d, not watched: %d)\n", l.Missed, l.Bounded, l.Skipped)
	fmt.Fprintf(w, "coordinator: RSS %s (peak %s), CPU %.2f cores; its judge+apply time per report %.3f ms; a round's batch lands %.1f ms (mean) after it is queued and updated_ms stamped\n",
		mib(float64(r.CoordRSS)), mib(float64(r.CoordHWM)), r.CoordCPU, r.IngestMeanMS, r.WriteMeanMS)
	if r.AgentReal {
		fmt.Fprintf(w, "agent (real isched-agent, fake Slurm): RSS %s (peak %s), CPU %.3f cores; Slurm commands %.1f/min %v\n",
			mib(float64(r.AgentRSS)), mib(float64(r.AgentHWM)), r.AgentCPU, r.SlurmPerMin, r.SlurmCalls)
	} else {
		fmt.Fprintf(w, "agent: simulated (the generator writes the job table and snapshot)\n")
	}
	fmt.Fprintf(w, "lost: %.0f reports never judged (trimmed from the ingest stream unread, as the generator counts); the coordinator counted %.0f trimmed unread\n",
		r.Unjudged, r.Trimmed)
	fmt.Fprintf(w, "load generator CPU %.2f cores; redis-server CPU %.2f cores (whole server, shared), RSS %s\n",
		r.GenCPU, r.RedisCPU, mib(float64(r.RedisRSS)))
	m := r.Memory
	fmt.Fprintf(w, "redis memory per job: %s of its own (state %s + status %s + series %s + its session and lineage entries); "+
		"all keys / jobs: %s, with the ingest stream %s [%d entries, MAXLEN ~100000] and the agent's keys %s\n",
		kib(m.Own), kib(m.State), kib(m.Status), kib(m.Series), kib(m.PerJob), mib(float64(m.Stream)), m.StreamLen, kib(float64(m.Agent)))
	if r.Aged > 0 {
		fmt.Fprintf(w, "an aged job (%d series points of %d, estimator window %d of 512): %s (state %s, series %s)\n",
			m.AgedSeriesLen, seriesCap, m.AgedWindowLen, kib(m.AgedJob), kib(m.AgedState), kib(m.AgedSeries))
		fmt.Fprintf(w, "at the caps (series scaled to %d points): %s per job -> %d such jobs: %s of keys (plus the ingest stream)\n",
			seriesCap, kib(capped(m)), r.Jobs, mib(capped(m)*float64(r.Jobs)))
	}
	if len(r.Rejected) > 0 {
		fmt.Fprintf(w, "rejected by reason: %v\n", r.Rejected)
	}
	if len(r.Decisions) > 0 {
		fmt.Fprintf(w, "decisions: %v\n", r.Decisions)
	}
	if r.SendErrors > 0 {
		fmt.Fprintf(w, "XADD errors: %d\n", r.SendErrors)
	}
	if len(r.CoordLogWarnings) > 0 {
		fmt.Fprintf(w, "coordinator warnings: %v\n", r.CoordLogWarnings)
	}
}

// capped is an aged job's keys with its series scaled to the coordinator's
// default seriesCap points (MEMORY USAGE of a list grows about linearly).
func capped(m bench.Memory) float64 {
	if m.AgedSeriesLen <= 0 {
		return m.AgedJob
	}
	return m.AgedJob - m.AgedSeries + m.AgedSeries*seriesCap/float64(m.AgedSeriesLen)
}

// seriesCap is the coordinator's default series length (Config.SeriesLen).
const seriesCap = 1000

func drain(d time.Duration) string {
	if d < 0 {
		return "not within the deadline"
	}
	return d.Round(100 * time.Millisecond).String()
}

func printSummary(w io.Writer, rs []*bench.Result) {
	fmt.Fprintf(w, "\n%-7s %10s %10s %8s %8s %8s %8s %8s %11s %10s %11s %10s %10s %10s %10s %10s %12s\n", "jobs", "offered/s", "accepted/s", "p50", "p90", "p99",
		"backlog", "lost", "coord peak", "coord CPU", "agent peak", "agent CPU", "slurm/min", "redis CPU", "own/job", "all/job", "job at caps")
	for _, r := range rs {
		agentPeak, agentCPU, slurm := "sim", "sim", "sim"
		if r.AgentReal {
			agentPeak, agentCPU, slurm = mib(float64(r.AgentHWM)), fmt.Sprintf("%.3f", r.AgentCPU), fmt.Sprintf("%.1f", r.SlurmPerMin)
		}
		fmt.Fprintf(w, "%-7d %10.0f %10.0f %8s %8s %8s %8.0f %8.0f %11s %10.2f %11s %10s %10s %10.2f %10s %10s %12s\n", r.Jobs, r.Offered, r.Accepted,
			ms(r.Latency.P50), ms(r.Latency.P90), ms(r.Latency.P99), r.Backlog, r.Unjudged, mib(float64(r.CoordHWM)), r.CoordCPU,
			agentPeak, agentCPU, slurm, r.RedisCPU, kib(r.Memory.Own), kib(r.Memory.PerJob), kib(capped(r.Memory)))
	}
	for _, r := range rs {
		if r.Jobs < 10000 {
			continue
		}
		p99ok := r.Latency.P99 < 1000
		rssok := r.CoordHWM < 1<<30
		fmt.Fprintf(w, "target at %d jobs: p99 < 1 s: %s (p99 %s); coordinator RSS < 1 GB: %s (peak %s)\n", r.Jobs,
			verdict(p99ok), ms(r.Latency.P99), verdict(rssok), mib(float64(r.CoordHWM)))
	}
}

// printSoak prints a soak's series and verdicts; false when a figure grew
// too much or could not be judged.
func printSoak(w io.Writer, r *bench.Result, warmUp time.Duration) bool {
	if len(r.Soak) == 0 {
		return true
	}
	fmt.Fprintf(w, "soak: %d samples, warm-up %s left out of the verdict\n", len(r.Soak), warmUp)
	fmt.Fprintf(w, "%10s %12s %15s %15s %12s %15s %16s %14s %14s %12s\n", "at", "coord RSS", "coord heap goal", "coord live heap", "agent RSS", "agent live heap", "redis job keys/job", "stored/job", "series/job", "stream")
	for _, p := range r.Soak {
		fmt.Fprintf(w, "%10s %12s %15s %15s %12s %15s %16s %14s %14s %12s\n", p.At.Round(time.Second), mib(float64(p.CoordRSS)), mib(float64(p.CoordHeapGoal)), mib(float64(p.CoordLiveHeap)),
			mib(float64(p.AgentRSS)), mib(float64(p.AgentLiveHeap)), kib(p.JobKeys), fmt.Sprintf("%.0f B", p.Bounded), kib(p.Series), mib(float64(p.Stream)))
	}
	ok := true
	for _, v := range r.SoakVerdicts {
		of := "median of the first half after warm-up"
		if v.Floor {
			of = "floor (minimum) of the quarter before the middle"
		}
		judged := verdict(v.Pass)
		if v.Shown {
			judged = "shown, not judged (the live heap is)"
			if strings.HasPrefix(v.Name, "redis bytes/job") {
				judged = "shown, not judged (allocator size classes; the stored bytes are)"
			}
		}
		fmt.Fprintf(w, "soak %-32s %s %12.0f, of the last quarter %12.0f: %+.1f%% over %d samples: %s\n",
			v.Name, of, v.Base, v.Last, 100*v.Growth, v.N, judged)
		ok = ok && (v.Pass || v.Shown)
	}
	fmt.Fprintf(w, "soak verdict (growth <= %.0f%%): %s (series lists and the ingest stream grow by design up to their caps: shown, not judged)\n",
		100*bench.SoakLimit, map[bool]string{true: "FLAT", false: "GREW or not judged"}[ok])
	return ok
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
