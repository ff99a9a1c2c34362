package cli

// The loaders the commands share: the inputs of an estimate (flags, model
// summary, site catalogue, receipts) and the cluster state.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/report"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// DefaultSitePath is where a site installs its catalogue.
const DefaultSitePath = "/etc/isched/site.json"

// inputs are the flags shared by estimate, plan and submit.
type inputs struct {
	model, site          string
	samples              int64
	epochs               int
	batches              string
	optimizer, precision string
	receipts, state      string
	overhead             time.Duration
	// pooled: other users' Slurm-confirmed receipts may inform the
	// estimate (robustly: plan.Request.Pooled)
	pooled bool
	// user and qos: whose job, under which QOS ("": the user's default);
	// the waits honour that user's Slurm limits. user "" is the caller.
	user, qos, account string
	// python: the interpreter the training runs in, for its footprint
	// record ("": python3 in PATH; submit: the command's program when it
	// is a Python)
	python string
	// script: the training script, whose imports are measured for the
	// static memory (scriptprobe.go); submit: the command's, when it is a
	// Python script. noProbe: never measure them.
	script  string
	noProbe bool
}

func (in *inputs) register(fs *pflag.FlagSet, batchHelp string) {
	fs.StringVar(&in.model, "model", "", "model summary (model.json from scripts/model_summary.py)")
	fs.StringVar(&in.site, "site", "", "site catalogue (default $ISCHED_SITE, else "+DefaultSitePath+")")
	fs.Int64Var(&in.samples, "samples", 0, "training samples per epoch")
	fs.IntVar(&in.epochs, "epochs", 1, "epochs")
	fs.StringVar(&in.batches, "batch", "", batchHelp)
	fs.StringVar(&in.optimizer, "optimizer", "adam", "optimizer: sgd, momentum, nesterov, rmsprop, adagrad, adam, adamw, lamb")
	fs.StringVar(&in.precision, "precision", "fp32", "training precision: fp32, bf16 or fp16 (autocast)")
	fs.StringVar(&in.receipts, "receipts", "auto", "receipts of finished runs: auto (Redis when reachable), redis, none, or a JSON file")
	fs.BoolVar(&in.pooled, "pooled", true, "also use other users' Slurm-confirmed receipts from Redis (median per user, never below the static estimate unless 3 users agree); false: your own only")
	fs.StringVar(&in.state, "state", "auto", "cluster state: auto (the agent's snapshot in Redis, else Slurm), redis, slurm, none")
	fs.DurationVar(&in.overhead, "migration-overhead", plan.DefaultMigrationOverhead, "wall time one move costs (checkpoint, requeue, restart)")
	fs.StringVar(&in.python, "python", "", "the Python the training runs in: its framework footprint (isched site probe --footprint) counts in the static memory (default: python3 in PATH; submit: the command's program when it is a Python)")
	fs.StringVar(&in.script, "script", "", "the training script (submit: the command's): what it imports besides torch is measured once in --python and counts in the static memory")
	fs.BoolVar(&in.noProbe, "no-probe", false, "do not measure what the training script imports (the static memory then counts torch's footprint alone)")
}

// registerQOS adds --qos and --account, for the commands whose flags do
// not already carry sbatch's.
func (in *inputs) registerQOS(fs *pflag.FlagSet) {
	fs.StringVar(&in.qos, "qos", "", "the QOS the job would run under (default: your default QOS): waits honour its per-user limits")
	fs.StringVarP(&in.account, "account", "A", "", "the account the job would be charged to (default: your default account): waits honour its quota (GrpTRES)")
}

// need is what a one-device job of nt asks, as in's user under in's QOS.
func (a *App) need(in *inputs, nt *plan.NodeType) plan.Need {
	n := plan.NeedOf(nt)
	n.User, n.QOS, n.Account = in.user, in.qos, in.account
	if n.User == "" {
		n.User = a.Username()
	}
	return n
}

// loaded is everything an estimate needs, read and checked.
type loaded struct {
	in          *inputs
	model       *plan.Model
	site        *plan.Site
	sitePath    string
	req         plan.Request
	rows        []plan.Row
	receiptsSrc string
	envNote     string // the environment's footprint record, "" for none
	view        clusterView
	waits       map[string]plan.Wait // by partition "/" node type
	// others are the other clusters' catalogues (addClusters), whose
	// partitions l.site also holds as PARTITION@CLUSTER
	others []clusterSite
}

func (l *loaded) wait(ps *plan.PartitionSpec, nt *plan.NodeType) plan.Wait {
	if w, ok := l.waits[ps.Name+"/"+nt.Name]; ok {
		return w
	}
	return plan.Wait{Partition: ps.Name, Reason: "unknown: " + strings.TrimSuffix(l.view.source, ": waits unknown")}
}

func parseBatches(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, usageErr("--batch %q: want positive integers, e.g. 8,16,32", s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, usageErr("--batch is required, e.g. --batch 8,16,32,64")
	}
	return out, nil
}

func (a *App) sitePath(flagValue string) (string, error) {
	switch {
	case flagValue != "":
		return flagValue, nil
	case a.Getenv("ISCHED_SITE") != "":
		return a.Getenv("ISCHED_SITE"), nil
	}
	if _, err := os.Stat(DefaultSitePath); err == nil {
		return DefaultSitePath, nil
	}
	return "", usageErr("no site catalogue: pass --site FILE or set ISCHED_SITE (the package ships a template, /etc/isched/site.json.example; examples/site-lab.json describes the local test cluster)")
}

func loadModel(path string) (*plan.Model, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("--model: %w", err)
	}
	m, err := plan.DecodeModel(b)
	if err != nil {
		return nil, fmt.Errorf("model summary %s: %w", path, err)
	}
	return m, nil
}

// openSite finds the site catalogue (a.sitePath) and loads it.
func (a *App) openSite(flagValue string) (string, *plan.Site, error) {
	path, err := a.sitePath(flagValue)
	if err != nil {
		return "", nil, err
	}
	s, err := loadSite(path)
	return path, s, err
}

func loadSite(path string) (*plan.Site, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	s, err := plan.DecodeSite(b)
	if err != nil {
		return nil, fmt.Errorf("site catalogue %s: %w", path, err)
	}
	if err := s.LoadProbes(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("site catalogue %s: %w", path, err)
	}
	return s, nil
}

// load reads the model, the catalogue, receipts and (withState) the cluster
// state, and computes the rows.
func (a *App) load(ctx context.Context, in *inputs, withState bool) (*loaded, error) {
	batches, tr, err := in.check()
	if err != nil {
		return nil, err
	}
	l := &loaded{in: in}
	if l.sitePath, err = a.sitePath(in.site); err != nil {
		return nil, err
	}
	if l.model, err = loadModel(in.model); err != nil {
		return nil, err
	}
	if l.site, err = loadSite(l.sitePath); err != nil {
		return nil, err
	}
	if err := a.addClusters(l); err != nil {
		return nil, err
	}
	fp, note, err := a.environment(ctx, in)
	if err != nil {
		return nil, err
	}
	l.site.UseEnvironment(fp)
	l.envNote = note
	receipts, pooled, src, err := a.loadReceipts(ctx, in.receipts)
	if err != nil {
		return nil, err
	}
	if !in.pooled {
		pooled = nil
	}
	l.receiptsSrc = src
	l.req = plan.Request{Model: l.model, Training: tr, Samples: in.samples, Epochs: in.epochs, Batches: batches, Receipts: receipts, Pooled: pooled}
	if l.rows, err = l.site.Estimate(l.req); err != nil {
		return nil, usageErr("%v", err)
	}
	l.view = clusterView{source: "not read"}
	l.waits = map[string]plan.Wait{}
	if withState {
		if err := a.loadWaits(ctx, l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// checkCounts refuses a negative --samples and an --epochs below one,
// which submit takes for the run's total even without a --model.
func (in *inputs) checkCounts() error {
	if in.samples < 0 {
		return usageErr("--samples %d: want the training samples per epoch, a positive number", in.samples)
	}
	if in.epochs <= 0 {
		return usageErr("--epochs %d: must be positive", in.epochs)
	}
	return nil
}

// check checks the flags load needs and returns the batch sizes and the
// training settings they give.
func (in *inputs) check() ([]int, plan.Training, error) {
	var tr plan.Training
	if in.model == "" {
		return nil, tr, usageErr("--model is required (make one with scripts/model_summary.py)")
	}
	if in.samples == 0 {
		return nil, tr, usageErr("--samples is required: training samples per epoch")
	}
	if err := in.checkCounts(); err != nil {
		return nil, tr, err
	}
	batches, err := parseBatches(in.batches)
	if err != nil {
		return nil, tr, err
	}
	tr = plan.Training{Optimizer: strings.ToLower(in.optimizer), Precision: strings.ToLower(in.precision)}
	if err := tr.Validate(); err != nil {
		return nil, tr, usageErr("%v", err)
	}
	return batches, tr, nil
}

// loadWaits reads the cluster state and estimates the wait of every
// partition and node type.
func (a *App) loadWaits(ctx context.Context, l *loaded) error {
	var err error
	if l.view, err = a.loadState(ctx, l.in.state); err != nil {
		return err
	}
	if l.in.state != "none" {
		defer a.otherWaits(ctx, l)
	}
	if l.view.state.Snapshot == nil {
		return nil
	}
	now := a.Now()
	for i := range l.site.Partitions {
		ps := &l.site.Partitions[i]
		if ps.Cluster() != "" {
			continue // another cluster's: otherWaits
		}
		for _, n := range ps.NodeTypes {
			nt := l.site.NodeType(n)
			l.waits[ps.Name+"/"+nt.Name] = l.site.EstimateWait(l.view.state, ps.Name, a.need(l.in, nt), now)
		}
	}
	return nil
}

// staleSnapshot is how old the agent's snapshot may be before `auto`
// prefers asking Slurm: an agent that stopped leaves its last snapshot.
const staleSnapshot = 5 * time.Minute

// maxStatusReads bounds the status keys read to learn the coordinator's
// predicted ends (one GET each).
const maxStatusReads = 200

// clusterView is the cluster state with where it came from.
type clusterView struct {
	state  plan.ClusterState
	source string // shown to the user
}

// loadState gets the cluster state. mode: "auto" (the agent's snapshot in
// Redis when fresh, else Slurm directly), "redis", "slurm" or "none".
func (a *App) loadState(ctx context.Context, mode string) (clusterView, error) {
	now := a.Now()
	switch mode {
	case "none":
		return clusterView{source: "none (--state none): waits unknown"}, nil
	case "redis", "auto":
		v, err := a.stateFromRedis(ctx, now)
		if err == nil && (mode == "redis" || now.Sub(time.UnixMilli(v.state.Snapshot.TakenMS)) <= staleSnapshot) {
			return v, nil
		}
		if mode == "redis" {
			return clusterView{}, err
		}
		why := "stale agent snapshot"
		if err != nil {
			why = err.Error()
		}
		sv, serr := a.stateFromSlurm(ctx, now)
		if serr != nil {
			return clusterView{source: fmt.Sprintf("unavailable (Redis: %s; Slurm: %v): waits unknown", why, serr)}, nil
		}
		sv.source += " (Redis: " + why + ")"
		return sv, nil
	case "slurm":
		return a.stateFromSlurm(ctx, now)
	}
	return clusterView{}, usageErr("--state %q: want auto, redis, slurm or none", mode)
}

func (a *App) stateFromRedis(ctx context.Context, now time.Time) (clusterView, error) {
	st, err := a.openStore(ctx)
	if err != nil {
		return clusterView{}, fmt.Errorf("redis: %w", err)
	}
	return a.stateFromStore(ctx, st, now)
}

// stateFromStore reads a cluster's state from the agent's snapshot and job
// table under st's keys.
func (a *App) stateFromStore(ctx context.Context, st Store, now time.Time) (clusterView, error) {
	k := st.Keys()
	b, err := st.Get(ctx, k.Snapshot())
	if err != nil {
		if errors.Is(err, stream.ErrNotFound) {
			return clusterView{}, fmt.Errorf("no snapshot in Redis (is isched-agent running?)")
		}
		return clusterView{}, err
	}
	env, err := report.DecodeTableOf(b, report.KindSnapshot)
	if err != nil {
		return clusterView{}, fmt.Errorf("snapshot %s: %w", k.Snapshot(), err)
	}
	v := clusterView{state: plan.ClusterState{Snapshot: env.Snapshot}}
	age := now.Sub(time.UnixMilli(env.Snapshot.TakenMS)).Round(time.Second)
	v.source = fmt.Sprintf("agent snapshot in Redis, %s old", age)
	if b, err := st.Get(ctx, k.Jobs()); err == nil {
		if env, err := report.DecodeTableOf(b, report.KindJobs); err == nil {
			v.state.Jobs = env.Jobs
			v.state.PredictedEnd = a.predictedEnds(ctx, st, env.Jobs)
		} else {
			v.source += fmt.Sprintf("; job table unreadable: %v", err)
		}
	} else {
		v.source += "; no job table"
	}
	return v, nil
}

// predictedEnds reads the coordinator's ETA of running isched jobs.
func (a *App) predictedEnds(ctx context.Context, st Store, jobs *report.JobTable) map[uint64]time.Time {
	out := map[uint64]time.Time{}
	reads := 0
	for i := range jobs.Jobs {
		j := &jobs.Jobs[i]
		if j.State != "RUNNING" || reads >= maxStatusReads {
			continue
		}
		p, ok, err := report.ParsePlanComment(j.Comment)
		if !ok || err != nil {
			continue
		}
		reads++
		s, err := readStatus(ctx, st, p.Lineage)
		if err != nil || s.JobID != j.JobID || s.ETAMS <= 0 {
			continue
		}
		out[j.JobID] = time.UnixMilli(s.ETAMS)
	}
	return out
}

func (a *App) stateFromSlurm(ctx context.Context, now time.Time) (clusterView, error) {
	s, err := a.Slurm.Poll(ctx)
	if err != nil {
		return clusterView{}, fmt.Errorf("slurm: %w", err)
	}
	snap := s.Snapshot(a.cluster(), now)
	jobs := s.JobTable(a.cluster(), now)
	return clusterView{state: plan.ClusterState{Snapshot: &snap, Jobs: &jobs}, source: "polled from Slurm now"}, nil
}

// readStatus reads a lineage's status as the coordinator stores it.
func readStatus(ctx context.Context, st Store, lineage string) (*report.JobStatus, error) {
	if !stream.ValidName(lineage) {
		return nil, fmt.Errorf("lineage %q: want 1-64 of [A-Za-z0-9._-]", lineage)
	}
	b, err := st.Get(ctx, st.Keys().JobStatus(lineage))
	if err != nil {
		return nil, err
	}
	var s report.JobStatus
	// Not strict: a newer coordinator may add fields, and the CLI shows
	// what it knows rather than nothing.
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("status of %s: %w", lineage, err)
	}
	if s.V != 0 && s.V != report.Version {
		return nil, fmt.Errorf("status of %s: schema version %d (this build reads %d)", lineage, s.V, report.Version)
	}
	return &s, nil
}

// loadReceipts reads receipts: "auto" (Redis when reachable, else none),
// "redis", "none", or a file (a JSON array of receipts, or one per line);
// with auto and redis also the user's own `isched profile` receipts
// (profiledPath), as own.
// From Redis, own are this uid's receipts and pooled other users'
// Slurm-confirmed ones (plan.SplitReceipts; the rest are not used); a
// file's are all own: the user chose them.
func (a *App) loadReceipts(ctx context.Context, from string) (own, pooled []report.Receipt, src string, err error) {
	own, pooled, src, err = a.loadFinished(ctx, from)
	if err != nil || from != "auto" && from != "redis" {
		return own, pooled, src, err
	}
	prof, path, bad, err := a.loadProfiled()
	if err != nil {
		return nil, nil, "", err
	}
	if len(prof) > 0 || bad > 0 {
		src += fmt.Sprintf("; %d profiled in %s", len(prof), path)
		if bad > 0 {
			src += fmt.Sprintf(" (%d unreadable or not yours skipped)", bad)
		}
	}
	return append(own, prof...), pooled, src, nil
}

// loadFinished reads the receipts of finished runs: from Redis (the
// coordinator's) or a file.
func (a *App) loadFinished(ctx context.Context, from string) (own, pooled []report.Receipt, src string, err error) {
	switch from {
	case "none":
		return nil, nil, "none", nil
	case "auto", "redis":
		st, err := a.openStore(ctx)
		if err == nil {
			var vals [][]byte
			vals, err = st.List(ctx, st.Keys().Receipts())
			if err == nil {
				rs, bad := decodeReceipts(vals)
				own, pooled, ignored := plan.SplitReceipts(rs, a.UID())
				src := fmt.Sprintf("%d in Redis: %d yours, %d of other users confirmed by Slurm", len(rs), len(own), len(pooled))
				if ignored > 0 {
					src += fmt.Sprintf(", %d unconfirmed ignored", ignored)
				}
				if bad > 0 {
					src += fmt.Sprintf(" (%d unreadable skipped)", bad)
				}
				return own, pooled, src, nil
			}
		}
		if from == "redis" {
			return nil, nil, "", fmt.Errorf("receipts: %w", err)
		}
		return nil, nil, "none (Redis: " + shortErr(err) + ")", nil
	}
	b, err := readFile(from)
	if err != nil {
		return nil, nil, "", fmt.Errorf("receipts: %w", err)
	}
	var rs []report.Receipt
	t := bytes.TrimSpace(b)
	if len(t) > 0 && t[0] == '[' {
		if err := json.Unmarshal(t, &rs); err != nil {
			return nil, nil, "", fmt.Errorf("receipts %s: %w", from, err)
		}
	} else {
		for n, line := range bytes.Split(t, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var r report.Receipt
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, nil, "", fmt.Errorf("receipts %s: line %d: %w", from, n+1, err)
			}
			rs = append(rs, r)
		}
	}
	return rs, nil, strconv.Itoa(len(rs)) + " from " + from, nil
}

func decodeReceipts(vals [][]byte) ([]report.Receipt, int) {
	var out []report.Receipt
	bad := 0
	for _, v := range vals {
		var r report.Receipt
		if err := json.Unmarshal(v, &r); err != nil {
			bad++
			continue
		}
		out = append(out, r)
	}
	return out, bad
}

func shortErr(err error) string {
	if err == nil {
		return "unavailable"
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
