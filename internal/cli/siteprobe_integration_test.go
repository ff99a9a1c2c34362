//go:build integration

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/isched/isched/internal/plan"
	"github.com/isched/isched/internal/testutil"
)

// TestSiteProbeOnCluster measures the dev partition's node type with
// scripts/site_probe.py (real torch) as a short Slurm job of the real
// isched: the record is checked and kept beside the catalogue, and the
// job's temporary record is gone.
func TestSiteProbeOnCluster(t *testing.T) {
	testutil.UseLab(t, "dev")
	testutil.NeedSlurm(t)
	root := testutil.RepoRoot()
	isched := testutil.Binary(t, "isched", "./isched")
	dir := testutil.WorkDir(t, "isched-siteprobe-it")
	site := labSiteIn(t, root, dir)
	env := map[string]string{"HOME": dir, "PATH": os.Getenv("PATH")}
	app := &App{Getenv: func(k string) string { return env[k] }, Getwd: func() (string, error) { return dir, nil }}
	var out, errb bytes.Buffer
	// the dev partition may be busy with other tests' jobs: --queue-wait
	// is generous, and so is the test's own limit
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	code := app.Run(ctx, []string{"site", "probe", "--partition", "dev", "--site", site, "--isched", isched,
		"--script", filepath.Join(root, "scripts/site_probe.py"), "--repeats", "1", "--threads", "1",
		"--timeout", "8m", "--queue-wait", "20m"}, &out, &errb)
	t.Log(errb.String())
	if code != 0 {
		t.Fatalf("site probe --partition dev: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "done on dev/dev1") || !strings.Contains(out.String(), "lab-dev: probed") {
		t.Errorf("output:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	raw, err := os.ReadFile(plan.ProbePath(dir, "lab-dev"))
	if err != nil {
		t.Fatalf("no record kept: %v", err)
	}
	p, err := plan.DecodeProbe(raw)
	if err != nil {
		t.Fatal(err)
	}
	if p.NodeType != "lab-dev" || p.Threads != 1 || len(p.RuntimeReferences) != 2 || p.RuntimeRSS.Max < p.ImportRSS.Median || p.Throughput[plan.WorkConv].Median <= 0 {
		t.Errorf("record %+v", p)
	}
	// the whole step of the residual reference, measured with its summary
	if r := p.ReferenceStep; r == nil || r.Network != "residual" || r.Summary == nil || r.Summary.FLOPsByKind[plan.WorkConv] <= 0 || r.Seconds.Median <= 0 {
		t.Errorf("reference step %+v", p.ReferenceStep)
	} else if !strings.Contains(out.String(), "whole step x") {
		t.Errorf("the output does not say the whole-step factor:\n%s", out.String())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.probe.json")); len(left) != 0 {
		t.Errorf("the job's record file is left: %q", left)
	}
}

// TestSiteProbeFootprintOnCluster measures the framework footprint of
// /usr/bin/python3 with an extra import (sympy, installed beside torch
// here) as a short Slurm job on dev: the record is kept in the user's data
// directory (no site file), and the estimate then names it.
func TestSiteProbeFootprintOnCluster(t *testing.T) {
	testutil.UseLab(t, "dev")
	testutil.NeedSlurm(t)
	root := testutil.RepoRoot()
	isched := testutil.Binary(t, "isched", "./isched")
	dir := testutil.WorkDir(t, "isched-footprint-it")
	site := labSiteIn(t, root, dir)
	env := map[string]string{"HOME": dir, "PATH": "/usr/bin:/bin", "ISCHED_CLUSTER": "lab"}
	app := &App{Getenv: func(k string) string { return env[k] }, Getwd: func() (string, error) { return dir, nil }}
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	code := app.Run(ctx, []string{"site", "probe", "--footprint", "--import", "sympy", "--partition", "dev", "--site", site, "--isched", isched,
		"--script", filepath.Join(root, "scripts/site_probe.py"), "--repeats", "1", "--threads", "1",
		"--timeout", "8m", "--queue-wait", "20m"}, &out, &errb)
	t.Log(errb.String())
	if code != 0 {
		t.Fatalf("site probe --footprint --partition dev: exit %d: %s", code, errb.String())
	}
	raw, err := os.ReadFile(app.footprintPath("/usr/bin/python3"))
	if err != nil {
		t.Fatalf("no record kept: %v", err)
	}
	fp, err := plan.DecodeFootprint(raw)
	if err != nil {
		t.Fatal(err)
	}
	if fp.NodeType != "lab-dev" || fp.Environment != "/usr/bin/python3" || len(fp.Imports) != 1 || fp.RuntimeRSS.Max < fp.ImportRSS.Median {
		t.Errorf("record %+v", fp)
	}
	if _, err := os.Stat(plan.ProbePath(dir, "lab-dev")); !os.IsNotExist(err) {
		t.Errorf("a footprint wrote the site's probe record: %v", err)
	}
	out.Reset()
	errb.Reset()
	code = app.Run(ctx, []string{"estimate", "--model", filepath.Join(root, "internal/cli/testdata/mnist_cnn.json"), "--site", site,
		"--batch", "8", "--samples", "1000", "--state", "none", "--receipts", "none", "--python", "/usr/bin/python3", "--explain"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "python:   /usr/bin/python3: framework "+plan.FormatBytes(fp.Bytes())) {
		t.Errorf("estimate: exit %d:\n%s%s", code, out.String(), errb.String())
	}
}

// labSiteIn copies the lab catalogue into dir: a probe record goes to
// probes/ beside it.
func labSiteIn(t *testing.T, root, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "examples/site-lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(dir, "site.json")
	if err := os.WriteFile(site, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return site
}
