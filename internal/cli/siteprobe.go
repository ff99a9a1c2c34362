package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/slurm"
	"github.com/isched/isched/internal/stream"
	"github.com/spf13/pflag"
)

// `isched site probe` measures the node type it runs on for the static
// model: the framework's memory footprint and the training throughput of
// each kind of layer (scripts/site_probe.py), and keeps the record in
// probes/<node type>.json beside the site catalogue, where estimate, plan
// and submit read it (plan.Site.LoadProbes). The site's administrator runs
// it once per node type, on a node of that type: here (--local), or as a
// short job (srun -p P isched site probe --local --node-type T).

// ProbeRunner runs the probe script (argv, no shell) and returns what it
// wrote on stdout; its stderr goes to stderr. The default runs it as a
// child process with the given timeout.
type ProbeRunner interface {
	RunProbe(ctx context.Context, argv []string, stderr io.Writer, timeout time.Duration) ([]byte, error)
}

// maxProbeOutput bounds the probe script's stdout (a record is ~1 KiB).
const maxProbeOutput = 1 << 20

type execProbe struct{}

// RunProbe runs the script as a child in its own process group
// (internal/child, no shell); past the timeout the group gets SIGTERM,
// then SIGKILL, so the script's own children go too.
func (execProbe) RunProbe(ctx context.Context, argv []string, stderr io.Writer, timeout time.Duration) ([]byte, error) {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out limitedBuffer
	exit, err := child.Run(runCtx, child.Config{Argv: argv, Stdout: &out, Stderr: stderr, Grace: 5 * time.Second}, nil)
	switch {
	case err != nil:
		return nil, fmt.Errorf("run %s: %w", argv[1], err)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case runCtx.Err() != nil:
		return nil, fmt.Errorf("%s did not finish within %s", argv[1], timeout)
	case exit.Signaled:
		return nil, fmt.Errorf("%s: killed by signal %d (%s)", argv[1], int(exit.Signal), exit.Signal)
	case exit.Code != 0:
		return nil, fmt.Errorf("%s: exit status %d", argv[1], exit.Code)
	case out.over:
		return nil, fmt.Errorf("%s wrote more than %d bytes", argv[1], maxProbeOutput)
	}
	return out.Bytes(), nil
}

// limitedBuffer keeps the first maxProbeOutput bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxProbeOutput {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

type siteProbeOpts struct {
	site, nodeType, python, script, output string
	partition, isched                      string
	imports                                string
	footprint                              bool
	threads, repeats                       int
	memMiB                                 int64
	local                                  bool
	timeout, queueWait                     time.Duration
}

// siteProbeCmd is `isched site probe`: measure a node type, or the user's
// environment's framework footprint.
type siteProbeCmd struct {
	app *App
	o   siteProbeOpts
}

func (c *siteProbeCmd) leaf() leaf {
	return leaf{
		use: "probe (--local --node-type T | --partition P [--node-type T]) [flags] (--local on a node of type T; --partition as a short Slurm job there)",
		short: "measure this node type (framework memory, throughput per kind of layer) for the static model, " +
			"once per node type (site administrators): isched site probe --partition P (a short job there), or --local --node-type T on a node of the type",
		ordered: true,
		flags:   c.o.register,
		run:     c.run, args: noArgs,
	}
}

func (c *siteProbeCmd) run(ctx context.Context, pos []string) error {
	a, o := c.app, &c.o
	imports, err := o.validate(pos)
	if err != nil {
		return err
	}
	sitePath, site, err := a.openSite(o.site)
	if err != nil {
		return err
	}
	if o.partition != "" {
		nt, err := profileNodeType(site, o.partition, o.nodeType)
		if err != nil {
			return err
		}
		o.nodeType = nt.Name
	}
	if site.NodeType(o.nodeType) == nil {
		return usageErr("--node-type %s: not in the site catalogue %s", o.nodeType, sitePath)
	}
	script, err := a.findProbeScript(o.script)
	if err != nil {
		return err
	}
	out, err := a.probeOutput(o, sitePath)
	if err != nil {
		return err
	}
	b, err := a.runProbe(ctx, o, sitePath, script, imports)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if o.footprint {
		return a.keepFootprint(o, b, out, script)
	}
	return a.keepProbe(o, site, b, out, script)
}

// register adds isched site probe's flags to fs.
func (o *siteProbeOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.site, "site", "", "site catalogue (default $ISCHED_SITE, else "+DefaultSitePath+"); the record goes to probes/ beside it")
	fs.StringVar(&o.nodeType, "node-type", "", "the catalogue's node type this machine is (required with --local; with --partition default the partition's only node type)")
	fs.BoolVar(&o.local, "local", false, "measure this machine (run the command on a node of the type)")
	fs.StringVar(&o.partition, "partition", "", "measure a node of this partition: a short Slurm job that runs isched site probe --local there")
	fs.DurationVar(&o.queueWait, "queue-wait", 30*time.Minute, "with --partition: how long the job may wait to start")
	fs.StringVar(&o.isched, "isched", "", "with --partition: the isched program the job runs (default: this one; the node must see it)")
	fs.StringVar(&o.python, "python", "/usr/bin/python3", "the Python with the framework the jobs use")
	fs.StringVar(&o.script, "script", "", "site_probe.py (default: share/isched/ or scripts/ beside this program)")
	fs.IntVar(&o.threads, "threads", 0, "torch threads of the micro-benchmarks (default: torch's default, all cores)")
	fs.IntVar(&o.repeats, "repeats", 5, "repeats of each measurement")
	fs.StringVarP(&o.output, "output", "o", "", "write the record here instead of probes/<node type>.json beside the catalogue (--footprint: your footprint record of --python)")
	fs.BoolVar(&o.footprint, "footprint", false, "measure only the framework footprint of the --python environment, for your own estimates (kept under ~/.local/share/isched; no site files written)")
	fs.StringVar(&o.imports, "import", "", "with --footprint: modules your scripts import besides torch, comma-separated (e.g. transformers,pandas)")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "how long the probe may take")
	fs.Int64Var(&o.memMiB, "mem-mib", 2048, "with --partition: the job's memory (MiB); the probe holds torch and one measured training process at a time, together about 1 GiB")
}

// probeOutput is where the record goes: -o, else the user's footprint
// record (--footprint), else probes/<node type>.json beside the catalogue.
func (a *App) probeOutput(o *siteProbeOpts, sitePath string) (string, error) {
	switch {
	case o.output != "":
		return o.output, nil
	case o.footprint:
		out := a.footprintPath(o.python)
		if out == "" {
			return "", usageErr("nowhere to keep the footprint record: set HOME or XDG_DATA_HOME, or pass -o")
		}
		return out, nil
	}
	return plan.ProbePath(filepath.Dir(sitePath), o.nodeType), nil
}

// runProbe runs the probe script, here or as a Slurm job on --partition,
// and returns its record.
func (a *App) runProbe(ctx context.Context, o *siteProbeOpts, sitePath, script string, imports []string) ([]byte, error) {
	if o.partition != "" {
		return a.probeSlurm(ctx, o, sitePath, script, imports)
	}
	argv := []string{o.python, script, "--node-type", o.nodeType, "--repeats", strconv.Itoa(o.repeats)}
	if o.threads > 0 {
		argv = append(argv, "--threads", strconv.Itoa(o.threads))
	}
	argv = append(argv, footprintArgs(o, imports, "--environment", o.python)...)
	if o.footprint {
		fmt.Fprintf(a.stderr, "isched site probe: measuring the framework footprint of %s here (import and three training steps, %d repeats)\n", o.python, o.repeats)
	} else {
		fmt.Fprintf(a.stderr, "isched site probe: measuring %s here (framework footprint; conv, depthwise, linear, elementwise and optimizer throughput; about a minute)\n", o.nodeType)
	}
	return a.Prober.RunProbe(ctx, argv, a.stderr, o.timeout)
}

// keepProbe checks a probe record from the probe script, keeps it at out
// and says what the static model of its node type now rests on.
func (a *App) keepProbe(o *siteProbeOpts, site *plan.Site, b []byte, out, script string) error {
	p, err := plan.DecodeProbe(b)
	if err != nil {
		return fmt.Errorf("probe record from %s: %w", script, err)
	}
	if p.NodeType != o.nodeType {
		return fmt.Errorf("probe record from %s: node_type %q, want %q", script, p.NodeType, o.nodeType)
	}
	if err := writeFileAtomic(out, b, 0o644); err != nil {
		return fmt.Errorf("keep the probe record: %w", err)
	}
	if err := site.SetProbe(p); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s: %s\n", o.nodeType, site.StaticBasis(site.NodeType(o.nodeType)))
	writeFrameworkRSS(a.stdout, p.ImportRSS, p.RuntimeRSS)
	for _, ref := range slices.Sorted(maps.Keys(p.RuntimeReferences)) {
		s := p.RuntimeReferences[ref]
		fmt.Fprintf(a.stdout, "  reference %s: %s (spread %s), %d repeats\n", ref, plan.FormatBytes(s.Median), plan.FormatBytes(s.Max-s.Min), s.Repeats)
	}
	fmt.Fprintf(a.stderr, "isched site probe: record kept in %s; estimate, plan and submit use it for %s (static rows say \"probed\")\n", out, o.nodeType)
	return nil
}

// writeFrameworkRSS says the measured import and runtime footprints.
func writeFrameworkRSS(w io.Writer, imp, run plan.ByteStat) {
	fmt.Fprintf(w, "framework RSS: import %s (spread %s), after training steps %s (spread %s), %d repeats\n",
		plan.FormatBytes(imp.Median), plan.FormatBytes(imp.Max-imp.Min), plan.FormatBytes(run.Median), plan.FormatBytes(run.Max-run.Min), run.Repeats)
}

// probeSlurm runs the probe as a short job on o.partition: the job runs
// `isched site probe --local` (under srun, no wrapper) with the same
// catalogue, script and settings, writing its record to a file in the
// working directory (which the node must share, as for any job's
// output); this process waits for the job, then returns the record, which
// the caller validates and keeps where --local keeps it (the catalogue's
// folder need not be writable on the node).
func (a *App) probeSlurm(ctx context.Context, o *siteProbeOpts, sitePath, script string, imports []string) ([]byte, error) {
	cwd, err := a.Getwd()
	if err != nil {
		return nil, err
	}
	exe := o.isched
	if exe == "" {
		if exe, err = a.Executable(); err != nil {
			return nil, fmt.Errorf("find this program for the job: %w (pass --isched PATH)", err)
		}
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return nil, err
	}
	if sitePath, err = filepath.Abs(sitePath); err != nil {
		return nil, err
	}
	lineage := a.newLineage("probe-" + o.nodeType)
	record := filepath.Join(cwd, "isched-"+lineage+".probe.json")
	output := filepath.Join(cwd, "isched-"+lineage+".out")
	limit := o.timeout + 2*time.Minute
	sc := o.probeScript(exe, sitePath, script, imports, probeFiles{lineage: lineage, record: record, output: output, cwd: cwd}, limit)
	text, err := sc.Render()
	if err != nil {
		return nil, err
	}
	env, dropped, err := sbatchEnv(a.Environ(), scriptOptions(text))
	if err != nil {
		return nil, err
	}
	for _, d := range dropped {
		fmt.Fprintf(a.stderr, "isched site probe: %s\n", d)
	}
	id, err := a.Slurm.SubmitWith(ctx, text, slurm.SubmitSpec{Env: env})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(a.stderr, "isched site probe: measuring %s as job %s on %s (time limit %s), output %s\n", o.nodeType, id, o.partition, limit, output)
	defer os.Remove(record)
	return a.awaitProbe(ctx, id, record, output, o.queueWait, limit)
}

// awaitProbe waits for the probe job's record: until the job ends, or
// past its time to start (queueWait) and run (limit).
func (a *App) awaitProbe(ctx context.Context, id, record, output string, queueWait, limit time.Duration) ([]byte, error) {
	deadline := a.Now().Add(queueWait + limit)
	started := false
	for {
		ji, err := a.Slurm.ShowJob(ctx, id)
		if err == nil {
			if !started && ji.State == "RUNNING" {
				started = true
				deadline = a.Now().Add(limit)
			}
			if slurm.Ended(ji.State) {
				// the record is written before the job ends; give a shared
				// file system a moment to show it
				b, err := waitFile(ctx, record, 10*time.Second)
				if ji.State != "COMPLETED" || err != nil {
					return nil, fmt.Errorf("job %s ended %s without a record in %s; output in %s:\n%s", id, ji.State, record, output, tail(output))
				}
				fmt.Fprintf(a.stderr, "isched site probe: job %s done on %s/%s\n", id, ji.Partition, ji.NodeList)
				return b, nil
			}
		}
		if a.Now().After(deadline) {
			return nil, fmt.Errorf("job %s not done in time; cancel it with scancel %s", id, id)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s left running (scancel %s): %w", id, id, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// probeFiles are the names of a probe job's files: its lineage, the
// record it writes, its output, all in the working directory.
type probeFiles struct{ lineage, record, output, cwd string }

// probeScript is the probe job's script: isched site probe --local on the
// node, with this command's settings.
func (o *siteProbeOpts) probeScript(exe, sitePath, script string, imports []string, f probeFiles, limit time.Duration) Script {
	argv := []string{exe, "site", "probe", "--local", "--node-type", o.nodeType, "--site", sitePath, "-o", f.record,
		"--python", o.python, "--script", script, "--repeats", strconv.Itoa(o.repeats), "--timeout", o.timeout.String()}
	if o.threads > 0 {
		argv = append(argv, "--threads", strconv.Itoa(o.threads))
	}
	argv = append(argv, footprintArgs(o, imports, "", "")...)
	return Script{
		Header:     []string{"Generated by `isched site probe --partition " + o.partition + "`."},
		JobName:    "isched-probe-" + o.nodeType,
		Partitions: []string{o.partition},
		TimeLimit:  limit,
		MemMiB:     o.memMiB,
		Output:     f.output,
		Chdir:      f.cwd,
		Env:        [][2]string{{"ISCHED_LINEAGE", f.lineage}},
		Unset:      []string{"ISCHED_REDIS_USER", "ISCHED_REDIS_PASSWORD_FILE"},
		Argv:       argv,
	}
}

// validate checks the flags (rest: the arguments left after them) and
// returns the --import modules.
func (o *siteProbeOpts) validate(rest []string) ([]string, error) {
	switch {
	case len(rest) > 0:
		return nil, usageErr("unexpected arguments %q", rest)
	case o.local == (o.partition != ""):
		return nil, usageErr("say where to measure: --local (this machine, a node of the type) or --partition P (a short Slurm job there), one of them")
	case o.partition != "" && !stream.ValidName(o.partition):
		return nil, usageErr("--partition %q: not a partition name", o.partition)
	case o.nodeType != "" && !stream.ValidName(o.nodeType):
		return nil, usageErr("--node-type %q: not a node type name (letters, digits, ., _, -)", o.nodeType)
	case o.local && o.nodeType == "":
		return nil, usageErr("--node-type is required: the catalogue's node type this machine is")
	case o.queueWait <= 0:
		return nil, usageErr("--queue-wait must be positive")
	case o.repeats < 1 || o.repeats > 100:
		return nil, usageErr("--repeats %d: want 1 to 100", o.repeats)
	case o.threads < 0 || o.threads > 4096:
		return nil, usageErr("--threads %d: want 0 (torch's default) to 4096", o.threads)
	case o.timeout <= 0:
		return nil, usageErr("--timeout must be positive")
	case o.memMiB < 512 || o.memMiB > 1<<30:
		return nil, usageErr("--mem-mib %d: want at least 512", o.memMiB)
	case !filepath.IsAbs(o.python):
		return nil, usageErr("--python %q: want an absolute path", o.python)
	}
	return parseImports(o.imports, o.footprint)
}

// parseImports reads --import: dotted module names, comma-separated, at
// most 64, only with --footprint.
func parseImports(s string, footprint bool) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	if !footprint {
		return nil, usageErr("--import needs --footprint")
	}
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); !plan.ValidModule(m) {
			return nil, usageErr("--import: %q is not a module name (e.g. transformers,pandas)", m)
		}
		out = append(out, m)
	}
	if len(out) > 64 {
		return nil, usageErr("--import: at most 64 modules")
	}
	return out, nil
}

// footprintArgs are the footprint flags of a probe command line: the
// script's (flag "--environment" with the interpreter) or isched's own
// (flag ""), nil without --footprint.
func footprintArgs(o *siteProbeOpts, imports []string, envFlag, env string) []string {
	if !o.footprint {
		return nil
	}
	args := []string{"--footprint"}
	if envFlag != "" {
		args = append(args, envFlag, env)
		for _, m := range imports {
			args = append(args, "--import", m)
		}
		return args
	}
	if len(imports) > 0 {
		args = append(args, "--import", strings.Join(imports, ","))
	}
	return args
}

// keepFootprint checks a footprint record from the probe script and keeps
// it at out (the user's file).
func (a *App) keepFootprint(o *siteProbeOpts, b []byte, out, script string) error {
	fp, err := plan.DecodeFootprint(b)
	if err != nil {
		return fmt.Errorf("footprint record from %s: %w", script, err)
	}
	if fp.NodeType != o.nodeType || fp.Environment != o.python {
		return fmt.Errorf("footprint record from %s: node_type %q, environment %q; want %q, %q", script, fp.NodeType, fp.Environment, o.nodeType, o.python)
	}
	if err := writeFileAtomic(out, b, 0o644); err != nil {
		return fmt.Errorf("keep the footprint record: %w", err)
	}
	fmt.Fprintf(a.stdout, "%s: %s\n", o.python, fp.Describe())
	writeFrameworkRSS(a.stdout, fp.ImportRSS, fp.RuntimeRSS)
	fmt.Fprintf(a.stderr, "isched site probe: record kept in %s; your estimate, plan and submit count it when the training runs in %s (--python, or the command's program)\n", out, o.python)
	return nil
}

// waitFile reads path, waiting up to d for it to appear.
func waitFile(ctx context.Context, path string, d time.Duration) ([]byte, error) {
	until := time.Now().Add(d)
	for {
		b, err := os.ReadFile(path)
		if err == nil || time.Now().After(until) {
			return b, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// findProbeScript is --script, else site_probe.py in share/isched or
// scripts beside this program's directory (an installed or a source tree).
func (a *App) findProbeScript(flagValue string) (string, error) {
	if flagValue != "" {
		return filepath.Abs(flagValue)
	}
	if exe, err := a.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, p := range []string{
			filepath.Join(dir, "..", "share", "isched", "site_probe.py"),
			filepath.Join(dir, "..", "scripts", "site_probe.py"),
		} {
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return filepath.Clean(p), nil
			}
		}
	}
	return "", usageErr("site_probe.py not found in share/isched or scripts beside isched: pass --script PATH")
}

// writeFileAtomic writes b to path through a temporary file in the same
// folder, creating the folder.
func writeFileAtomic(path string, b []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
