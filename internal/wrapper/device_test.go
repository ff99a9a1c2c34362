package wrapper

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/report"
)

type fakeGPU struct{ stat report.GPUStat }

func (f fakeGPU) Sample([]int32) *report.GPUStat { s := f.stat; return &s }

// TestDeviceFollowsNVML: CUDA_VISIBLE_DEVICES alone (Slurm sets it for any
// GPU GRES) does not make the job use cuda; NVML seeing a device does.
func TestDeviceFollowsNVML(t *testing.T) {
	cases := []struct {
		name string
		gpu  report.GPUStat
		want string
	}{
		{"no NVML", report.GPUStat{NoData: "nvml init: ERROR_LIBRARY_NOT_FOUND"}, "cpu"},
		{"NVML with a device", report.GPUStat{Devices: []report.GPUDevice{{Index: 0, UUID: "GPU-1"}}}, "cuda"},
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	t.Setenv("ISCHED_DEVICE", "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "env")
			opts, err := ParseArgs([]string{"--no-report", "--", "/bin/sh", "-c", `printf %s "$ISCHED_DEVICE" > "$0"`, out}, func(string) string { return "" }, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			code := Run(context.Background(), opts, Deps{Getenv: func(string) string { return "" }, Stdout: &bytes.Buffer{}, Stderr: &stderr, GPU: fakeGPU{tc.gpu}})
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
