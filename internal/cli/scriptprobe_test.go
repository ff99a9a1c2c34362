package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPythonScript(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		argv []string
		want string
	}{
		{[]string{"python3", "train.py", "--lr", "0.1"}, "train.py"},
		{[]string{"/opt/venv/bin/python", "-u", "-W", "ignore", "-X", "dev", "src/train.py"}, "src/train.py"},
		{[]string{"python3.11", "-m", "torch.distributed.run", "train.py"}, ""},
		{[]string{"python", "-c", "print(1)"}, ""},
		{[]string{"bash", "train.py"}, ""},
		{[]string{"python3"}, ""},
	} {
		if got := pythonScript(tt.argv); got != tt.want {
			t.Errorf("pythonScript(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// scriptedProber answers site_probe.py's two modes: --list-imports with
// list, --footprint with a record of the --import modules given.
type scriptedProber struct {
	list  string
	calls [][]string
	fail  error
}

func (p *scriptedProber) RunProbe(_ context.Context, argv []string, _ io.Writer, _ time.Duration) ([]byte, error) {
	p.calls = append(p.calls, argv)
	if argv[2] == "--list-imports" {
		return []byte(p.list), nil
	}
	if p.fail != nil {
		return nil, p.fail
	}
	var imports []string
	for i, a := range argv {
		if a == "--import" {
			imports = append(imports, argv[i+1])
		}
	}
	rec := strings.Replace(fakeFootprint, `"imports": ["transformers"]`, `"imports": `+mustJSON(imports), 1)
	return []byte(rec), nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestScriptImportsMeasured: submit --dry-run of a Python script measures
// what the script imports (once: the record then covers them), keeps the
// record, and the static memory counts it; a script that imports more
// measures again with both; --no-probe and a probe that fails leave the
// estimate on what it had, saying why.
func TestScriptImportsMeasured(t *testing.T) {
	h := newHarness(t)
	p := &scriptedProber{list: `{"imports": ["sklearn.linear_model", "torchvision.models"], "local": ["mypkg"], "missing": []}`}
	repo, _ := filepath.Abs("../..")
	run := func(args ...string) (int, string, string) {
		app := h.app()
		app.Prober = p
		app.Executable = func() (string, error) { return filepath.Join(repo, "bin", "isched"), nil }
		var out, errb bytes.Buffer
		code := app.Run(context.Background(), args, &out, &errb)
		return code, out.String(), errb.String()
	}
	submit := []string{"submit", "--dry-run", "--model", "testdata/mnist_cnn.json", "--site", "../../examples/site-lab.json", "--batch", "8",
		"--samples", "1000", "--state", "none", "--receipts", "none", "--wrapper", "/opt/isched/bin/isched-wrapper", "--", "/usr/bin/python3", "train.py"}
	code, _, errOut := run(submit...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if len(p.calls) != 2 || !slices.Equal(p.calls[0][2:], []string{"--list-imports", filepath.Join(harnessCwd, "train.py")}) {
		t.Fatalf("probe calls %q, want the list then the footprint", p.calls)
	}
	fp := p.calls[1]
	if !slices.Equal(fp[:6], []string{"/usr/bin/python3", filepath.Join(repo, "scripts", "site_probe.py"), "--footprint", "--environment", "/usr/bin/python3", "--node-type"}) ||
		!strings.Contains(strings.Join(fp, " "), "--data-limit 8589934592 --import sklearn.linear_model --import torchvision.models") || slices.Contains(fp, "mypkg") {
		t.Errorf("footprint probe %q", fp)
	}
	if !strings.Contains(errOut, "measuring what "+filepath.Join(harnessCwd, "train.py")+" imports (sklearn.linear_model, torchvision.models) in /usr/bin/python3") {
		t.Errorf("stderr does not say what is measured:\n%s", errOut)
	}
	if b, err := os.ReadFile(h.app().footprintPath("/usr/bin/python3")); err != nil || !strings.Contains(string(b), `"sklearn.linear_model"`) {
		t.Fatalf("record not kept: %v %s", err, b)
	}
	// the record covers the script now: listed, not measured again
	if code, _, errOut := run(submit...); code != 0 || len(p.calls) != 3 {
		t.Fatalf("second submit: exit %d, %d probe calls (want one more: the list): %s", code, len(p.calls), errOut)
	}
	// a script that imports more: measured with both
	p.list = `{"imports": ["pandas"], "local": [], "missing": []}`
	if code, _, errOut := run(submit...); code != 0 || len(p.calls) != 5 || !strings.Contains(strings.Join(p.calls[4], " "), "--import pandas --import sklearn.linear_model --import torchvision.models") {
		t.Fatalf("more imports: exit %d, calls %q: %s", code, p.calls, errOut)
	}
	// --no-probe: nothing runs
	n := len(p.calls)
	p.list = `{"imports": ["scipy"], "local": [], "missing": []}`
	if code, _, errOut := run(append(slices.Clone(submit[:2]), append([]string{"--no-probe"}, submit[2:]...)...)...); code != 0 || len(p.calls) != n {
		t.Fatalf("--no-probe: exit %d, %d probe calls: %s", code, len(p.calls)-n, errOut)
	}
	// the probe fails: the estimate goes on with the record it had, and says so
	p.fail = errors.New("site_probe.py: exit status 1")
	code, out, errOut := run(submit...)
	if code != 0 || !strings.Contains(errOut, "the imports of "+filepath.Join(harnessCwd, "train.py")+" not measured: site_probe.py: exit status 1") || !strings.Contains(out, "#!/bin/bash") {
		t.Errorf("failed probe: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestListImports runs site_probe.py --list-imports with Debian's Python
// on a script of every kind of import: only what the environment holds
// besides the standard library is listed; the script's own modules are
// local (never imported), and nothing of the script runs.
func TestListImports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "mypkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"mypkg/__init__.py": "raise SystemExit('imported')\n",
		"train.py": "import os, json\nimport torch\nimport torch.nn as nn\nfrom torchvision.models import resnet18\nfrom mypkg import util\n" +
			"import nosuchmodule_xyz\nfrom . import sibling\nopen('ran', 'w').write('x')\ndef main():\n    import PIL.Image\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("/usr/bin/python3", "../../scripts/site_probe.py", "--list-imports", filepath.Join(dir, "train.py")).Output()
	if err != nil {
		t.Fatalf("site_probe.py --list-imports (python3 with torch is installed by make deps): %v", err)
	}
	var got scriptImports
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := scriptImports{Imports: []string{"PIL.Image", "torch.nn", "torchvision.models"}, Local: []string{"mypkg"}, Missing: []string{"nosuchmodule_xyz"}}
	if !slices.Equal(got.Imports, want.Imports) || !slices.Equal(got.Local, want.Local) || !slices.Equal(got.Missing, want.Missing) {
		t.Errorf("listed %+v, want %+v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the script ran")
	}
}
