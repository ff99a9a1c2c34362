package wrapper

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

type fakeGPU struct{ stat report.GPUStat }

func (f fakeGPU) Sample([]int32) *report.GPUStat { s := f.stat; return &s }

// TestDeviceFollowsNVML: CUDA_VISIBLE_DEVICES alone (Slurm sets it for any
// GPU GRES) does not make the job use cuda; NVML seeing a device does. In
// Slurm a job without CUDA_VISIBLE_DEVICES was given no GPU; outside Slurm
// (a workstation, as on the GPU machine scripts/gpu-check ran on) it may use
// the GPUs NVML sees.
func TestDeviceFollowsNVML(t *testing.T) {
	t.Parallel()
	nvmlDevice := report.GPUStat{Devices: []report.GPUDevice{{Index: 0, UUID: "GPU-1"}}}
	slurm := map[string]string{"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice",
		"SLURM_JOB_UID": strconv.Itoa(os.Getuid()), "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_ID": "0"}
	cases := []struct {
		name string
		env  map[string]string
		gpu  report.GPUStat
		want string
	}{
		{"no NVML", map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, report.GPUStat{NoData: "nvml init: ERROR_LIBRARY_NOT_FOUND"}, "cpu"},
		{"NVML with a device", map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, nvmlDevice, "cuda"},
		{"outside Slurm, nothing set", map[string]string{}, nvmlDevice, "cuda"},
		{"Slurm gave no GPU", slurm, nvmlDevice, "cpu"},
		{"Slurm gave a GPU", merge(slurm, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}), nvmlDevice, "cuda"},
		{"NoDevFiles", map[string]string{"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, nvmlDevice, "cpu"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			// the job's environment comes through Deps, not the test process's
			env := merge(tc.env, map[string]string{"TMPDIR": tmp})
			getenv := func(k string) string { return env[k] }
			environ := func() []string {
				var kv []string
				for k, v := range env {
					kv = append(kv, k+"="+v)
				}
				return kv
			}
			out := filepath.Join(tmp, "env")
			opts, err := ParseArgs([]string{"--no-report", "--", "/bin/sh", "-c", `printf %s "$ISCHED_DEVICE" > "$0"`, out}, getenv, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			code := Run(context.Background(), opts, Deps{Getenv: getenv, Environ: environ, Stdout: &bytes.Buffer{}, Stderr: &stderr,
				Logger: slog.New(slog.DiscardHandler), GPU: fakeGPU{tc.gpu}})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			b, _ := os.ReadFile(out)
			if got := strings.TrimSpace(string(b)); got != tc.want {
				t.Errorf("ISCHED_DEVICE=%q, want %q", got, tc.want)
			}
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	m := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// TestEnvironmentThroughDeps: the child's environment, the node's name and
// the visible GPUs in the start report come from Deps, never from the
// wrapper's own process.
func TestEnvironmentThroughDeps(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_CLUSTER_NAME": "lab", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": strconv.Itoa(os.Getuid()),
		"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_PARTITION": "gpu", "SLURMD_NODENAME": "gpu1", "SLURM_STEP_ID": "0", "TMPDIR": tmp,
		"CUDA_VISIBLE_DEVICES": "2,3", "FROM_DEPS": "yes"}
	getenv := func(k string) string { return env[k] }
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	out := filepath.Join(tmp, "seen")
	opts, err := ParseArgs([]string{"--lineage", "lab-42", "--", "/bin/sh", "-c", `printf '%s %s' "$FROM_DEPS" "$CUDA_VISIBLE_DEVICES" > "$0"`, out}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	sink := &endSink{}
	var stderr bytes.Buffer
	code := Run(context.Background(), opts, Deps{
		Getenv: getenv, Environ: func() []string { return environ }, Hostname: func() (string, error) { return "node-from-deps", nil },
		Stdout: &bytes.Buffer{}, Stderr: &stderr, Logger: slog.New(slog.DiscardHandler),
		Connect: func(context.Context, string) (appender, error) { return sink, nil },
	})
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if b, _ := os.ReadFile(out); string(b) != "yes 2,3" {
		t.Errorf("the child saw %q, want the environment Deps gave (\"yes 2,3\")", b)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var start *report.Start
	for _, e := range sink.got {
		if e.Start != nil {
			start = e.Start
		}
	}
	if start == nil {
		t.Fatal("no start report")
	}
	if start.Host != "node-from-deps" || !slices.Equal(start.GPUs, []string{"2", "3"}) {
		t.Errorf("start report host %q GPUs %q, want node-from-deps [2 3]", start.Host, start.GPUs)
	}
}
