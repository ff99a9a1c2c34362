package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/plan"
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
	threads, repeats                       int
	local                                  bool
	timeout                                time.Duration
}

func (a *App) siteCmd(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "probe" {
		return usageErr("want a subcommand: isched site probe --local --node-type T [flags]")
	}
	return a.siteProbe(ctx, args[1:])
}

func (a *App) siteProbe(ctx context.Context, args []string) error {
	fs := a.newFlags("site probe", "--local --node-type T [flags] (on a node of type T; as a short job: srun -p P isched site probe --local --node-type T)")
	var o siteProbeOpts
	fs.StringVar(&o.site, "site", "", "site catalogue (default $ISCHED_SITE, else "+DefaultSitePath+"); the record goes to probes/ beside it")
	fs.StringVar(&o.nodeType, "node-type", "", "the catalogue's node type this machine is (required)")
	fs.BoolVar(&o.local, "local", false, "measure this machine (required: run the command on a node of the type)")
	fs.StringVar(&o.python, "python", "/usr/bin/python3", "the Python with the framework the jobs use")
	fs.StringVar(&o.script, "script", "", "site_probe.py (default: share/isched/ or scripts/ beside this program)")
	fs.IntVar(&o.threads, "threads", 0, "torch threads of the micro-benchmarks (default: torch's default, all cores)")
	fs.IntVar(&o.repeats, "repeats", 5, "repeats of each measurement")
	fs.StringVar(&o.output, "o", "", "write the record here instead of probes/<node type>.json beside the catalogue")
	fs.DurationVar(&o.timeout, "timeout", 15*time.Minute, "how long the probe may take")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case !o.local:
		return usageErr("--local is required: the probe measures the machine it runs on (as a short job: srun -p P isched site probe --local --node-type T)")
	case o.nodeType == "":
		return usageErr("--node-type is required: the catalogue's node type this machine is")
	case o.repeats < 1 || o.repeats > 100:
		return usageErr("--repeats %d: want 1 to 100", o.repeats)
	case o.threads < 0 || o.threads > 4096:
		return usageErr("--threads %d: want 0 (torch's default) to 4096", o.threads)
	case o.timeout <= 0:
		return usageErr("--timeout must be positive")
	case !filepath.IsAbs(o.python):
		return usageErr("--python %q: want an absolute path", o.python)
	}
	sitePath, err := a.sitePath(o.site)
	if err != nil {
		return err
	}
	site, err := loadSite(sitePath)
	if err != nil {
		return err
	}
	if site.NodeType(o.nodeType) == nil {
		return usageErr("--node-type %s: not in the site catalogue %s", o.nodeType, sitePath)
	}
	script, err := a.findProbeScript(o.script)
	if err != nil {
		return err
	}
	out := o.output
	if out == "" {
		out = plan.ProbePath(filepath.Dir(sitePath), o.nodeType)
	}
	argv := []string{o.python, script, "--node-type", o.nodeType, "--repeats", strconv.Itoa(o.repeats)}
	if o.threads > 0 {
		argv = append(argv, "--threads", strconv.Itoa(o.threads))
	}
	fmt.Fprintf(a.stderr, "isched site probe: measuring %s here (framework footprint; conv, depthwise, linear, elementwise and optimizer throughput; about a minute)\n", o.nodeType)
	b, err := a.Prober.RunProbe(ctx, argv, a.stderr, o.timeout)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
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
	fmt.Fprintf(a.stdout, "framework RSS: import %s (spread %s), after training steps %s (spread %s), %d repeats\n",
		plan.FormatBytes(p.ImportRSS.Median), plan.FormatBytes(p.ImportRSS.Max-p.ImportRSS.Min),
		plan.FormatBytes(p.RuntimeRSS.Median), plan.FormatBytes(p.RuntimeRSS.Max-p.RuntimeRSS.Min), p.RuntimeRSS.Repeats)
	for _, ref := range slices.Sorted(maps.Keys(p.RuntimeReferences)) {
		s := p.RuntimeReferences[ref]
		fmt.Fprintf(a.stdout, "  reference %s: %s (spread %s), %d repeats\n", ref, plan.FormatBytes(s.Median), plan.FormatBytes(s.Max-s.Min), s.Repeats)
	}
	fmt.Fprintf(a.stderr, "isched site probe: record kept in %s; estimate, plan and submit use it for %s (static rows say \"probed\")\n", out, o.nodeType)
	return nil
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
