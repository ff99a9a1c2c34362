package plan

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const python = "/usr/bin/python3" // Debian's, with python3-torch (make deps)

// summarize runs scripts/model_summary.py and decodes its output, which is
// the contract between the Python and the Go side.
func summarize(t *testing.T, args ...string) *Model {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s with python3-torch is needed to test scripts/model_summary.py: %v", python, err)
	}
	script, err := filepath.Abs("../../scripts/model_summary.py")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, append([]string{script}, args...)...)
	cmd.Dir = t.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("model_summary.py %q: %v\n%s", args, err, errb.String())
	}
	m, err := DecodeModel(out.Bytes())
	if err != nil {
		t.Fatalf("model_summary.py %q wrote a summary DecodeModel refuses: %v\n%s", args, err, out.String())
	}
	return m
}

func TestModelSummaryScript(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	net := filepath.Join(dir, "net.py")
	if err := os.WriteFile(net, []byte(`import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(64, 2)
    def forward(self, x):
        return self.fc(self.flat(self.pool(self.relu(self.conv(x)))))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("file module", func(t *testing.T) {
		t.Parallel()
		m := summarize(t, "--model", net+":Net", "--input", "1,8,8")
		// conv 4x8x8 floats (1024 B), the in-place ReLU nothing, the pool's
		// 4x4x4 values (256 B) and int64 indices (512 B), the flatten a
		// view, the linear 2 floats (8 B)
		if m.Parameters != 170 || m.TrainableParameters != 170 || m.ActivationBytesPerSample != 1800 || m.ActivationsCounted != "aten-outputs" {
			t.Errorf("parameters %d/%d, activations %d (%s)", m.Parameters, m.TrainableParameters, m.ActivationBytesPerSample, m.ActivationsCounted)
		}
		// conv: 2 x 256 outputs x 9 taps; linear: 2 x 64 x 2
		if m.FLOPsPerSample != 2*256*9+2*64*2 {
			t.Errorf("FLOPs %d", m.FLOPsPerSample)
		}
		want := []struct {
			name, typ string
			params    int64
			bytes     int64
		}{{"conv", "Conv2d", 40, 1024}, {"relu", "ReLU", 0, 0}, {"pool", "MaxPool2d", 0, 256}, {"flat", "Flatten", 0, 0}, {"fc", "Linear", 130, 8}}
		if len(m.Layers) != len(want) {
			t.Fatalf("%d layers: %+v", len(m.Layers), m.Layers)
		}
		for i, w := range want {
			l := m.Layers[i]
			if l.Name != w.name || l.Type != w.typ || l.Params != w.params || l.OutputBytes != w.bytes {
				t.Errorf("layer %d: %+v, want %+v", i, l, w)
			}
		}
	})
	t.Run("kinds", func(t *testing.T) {
		t.Parallel()
		kn := filepath.Join(dir, "kinds.py")
		if err := os.WriteFile(kn, []byte(`import torch.nn as nn
def Net():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1, groups=4),
                         nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(256, 2))
`), 0o644); err != nil {
			t.Fatal(err)
		}
		m := summarize(t, "--model", kn+":Net", "--input", "1,8,8")
		// conv: 2 x 256 outputs x 1 input channel x 9; depthwise: the same
		// (one input channel per group); linear: 2 x 256 x 2
		want := map[string]int64{"conv": 4608, "depthwise": 4608, "linear": 1024}
		if len(m.FLOPsByKind) != 3 || m.FLOPsPerSample != 4608+4608+1024 {
			t.Fatalf("FLOPs %d by kind %v, want %v", m.FLOPsPerSample, m.FLOPsByKind, want)
		}
		for k, v := range want {
			if m.FLOPsByKind[k] != v {
				t.Errorf("flops_by_kind[%s] %d, want %d", k, m.FLOPsByKind[k], v)
			}
		}
		kinds := []struct {
			kind  string
			flops int64
		}{{"conv", 4608}, {"depthwise", 4608}, {"other", 0}, {"other", 0}, {"linear", 1024}}
		if len(m.Layers) != len(kinds) {
			t.Fatalf("%d layers: %+v", len(m.Layers), m.Layers)
		}
		for i, w := range kinds {
			if l := m.Layers[i]; l.Kind != w.kind || l.FLOPs != w.flops {
				t.Errorf("layer %d (%s): kind %q flops %d, want %q %d", i, l.Name, l.Kind, l.FLOPs, w.kind, w.flops)
			}
		}
	})
	t.Run("module path with arguments", func(t *testing.T) {
		t.Parallel()
		m := summarize(t, "--model", "torch.nn:Linear", "--kwargs", `{"in_features": 10, "out_features": 5}`, "--input", "10", "--name", "lin")
		if m.Name != "lin" || m.Parameters != 55 || m.FLOPsPerSample != 100 || m.ActivationBytesPerSample != 20 || len(m.InputShape) != 1 {
			t.Errorf("%+v", m)
		}
	})
	t.Run("torchvision without weights", func(t *testing.T) {
		t.Parallel()
		m := summarize(t, "--model", "torchvision:resnet18", "--kwargs", `{"num_classes": 10}`, "--input", "3,32,32", "--no-layers")
		// torchvision's ResNet-18 with a 10-class head
		if m.Parameters != 11181642 || len(m.Layers) != 0 {
			t.Errorf("parameters %d, %d layers", m.Parameters, len(m.Layers))
		}
	})
}
