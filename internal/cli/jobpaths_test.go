package cli

import (
	"bytes"
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJobPathsInSharedDirectory: submitted from a directory every user may
// write to (a 1777 /tmp), the job's output and checkpoints go to the
// user's private directory; an --output or --checkpoint-dir there is
// refused; elsewhere the defaults stay in the working directory.
func TestJobPathsInSharedDirectory(t *testing.T) {
	h := newHarness(t)
	h.labState()
	shared := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	h.env["HOME"] = home
	run := func(cwd string, args ...string) (int, string, string) {
		app := h.app()
		app.Getwd = func() (string, error) { return cwd, nil }
		var out, errb bytes.Buffer
		base := []string{"submit", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/opt/isched/bin/isched-wrapper"}
		code := app.Run(context.Background(), append(append(base, args...), "--", "/usr/bin/python3", filepath.Join(harnessCwd, "train.py")), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errOut := run(shared)
	if code != 0 {
		t.Fatalf("from %s: exit %d: %s", shared, code, errOut)
	}
	private := filepath.Join(home, ".cache/isched/jobs/lab-u1001-train-abababab")
	script := string(h.slurm.submitted[len(h.slurm.submitted)-1])
	for _, want := range []string{"#SBATCH --output=" + private + "/isched-lab-u1001-train-abababab.out\n", "--checkpoint-dir " + private + "/checkpoints "} {
		if !strings.Contains(script, want) {
			t.Errorf("script without %q:\n%s", want, script)
		}
	}
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("private directory %s: %v %v, want made 0700", private, fi, err)
	}
	if !strings.Contains(errOut, shared+" is writable by every user") || strings.Contains(out+script, shared+"/isched-") {
		t.Errorf("stderr %q; script:\n%s", errOut, script)
	}
	for _, flag := range []string{"--output=x.out", "--output=" + shared + "/x.out", "--checkpoint-dir=" + shared + "/ck"} {
		if code, _, errOut := run(shared, flag); code != ExitUsage || !strings.Contains(errOut, "writable by every user, who could plant") {
			t.Errorf("%s from %s: exit %d %q, want refused", flag, shared, code, errOut)
		}
	}
	// a directory of the user's own: the defaults in it, as before
	own := t.TempDir()
	if code, _, errOut := run(own); code != 0 || strings.Contains(errOut, "writable by every user") {
		t.Fatalf("from %s: exit %d: %s", own, code, errOut)
	}
	if script := string(h.slurm.submitted[len(h.slurm.submitted)-1]); !strings.Contains(script, "#SBATCH --output="+own+"/isched-") {
		t.Errorf("from %s, script:\n%s", own, script)
	}
}

func TestCheckOwnDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	me := os.Geteuid()
	mine := filepath.Join(dir, "mine")
	open := filepath.Join(dir, "open")
	link := filepath.Join(dir, "link")
	for _, d := range []string{mine, open} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir  string
		uid  int
		want string
	}{
		{mine, me, ""},
		{mine, me + 1, "not to you"},
		{open, me, "writable by every user"},
		{link, me, "not a directory (a symlink?)"},
	} {
		err := checkOwnDir(os.Lstat, tt.dir, tt.uid)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s as uid %d: %v, want %q", tt.dir, tt.uid, err, tt.want)
		}
	}
}

// TestLineageOutsideNamespaceWarns: a free-form --lineage can be squatted
// by another user before the job's first report; submit says so and
// names the namespaced form (issue 26, item 7).
func TestLineageOutsideNamespaceWarns(t *testing.T) {
	h := newHarness(t)
	h.labState()
	base := []string{"submit", "--dry-run", "--partition-ideal", "cpu", "--wrapper", "/w"}
	_, _, errOut := h.run(append(base, "--lineage", "resnet-run", "--", "/usr/bin/python3", "x.py")...)
	if want := `isched: warning: lineage "resnet-run" is not in your namespace (lab-u1001-…)`; !strings.Contains(errOut, want) ||
		!strings.Contains(errOut, "use --lineage lab-u1001-resnet-run") {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if _, _, errOut := h.run(append(base, "--lineage", "lab-u1001-resnet-run", "--", "/usr/bin/python3", "x.py")...); strings.Contains(errOut, "namespace") {
		t.Errorf("a namespaced lineage warned: %q", errOut)
	}
}

// TestJobPathsOfAnotherUser (issue 44, item 5): alice (uid 1001) may not
// put her checkpoints, nor her output, in a directory of bob's (1002), even
// one every user may not write to: bob can replace or link any entry in it.
// The dry run refuses, naming the flag, the path and bob's uid; a
// directory of hers or root's is fine. The files are fakes (App.Stat and
// Lstat), so no second user is needed.
func TestJobPathsOfAnotherUser(t *testing.T) {
	dir, bob := fs.ModeDir|0o755, 4242
	for _, tt := range []struct {
		name string
		add  fakeHomes
		args []string
		want []string // none: accepted; else each in the refusal
	}{
		{"checkpoints to be made in bob's directory", fakeHomes{"/home/bob/shared": {dir, bob}},
			[]string{"--checkpoint-dir", "/home/bob/shared/ckpt"}, []string{"--checkpoint-dir /home/bob/shared/ckpt: /home/bob/shared is owned by", "uid 4242"}},
		{"deeper: the nearest existing directory is bob's", fakeHomes{"/home/bob/shared": {dir, bob}},
			[]string{"--checkpoint-dir", "/home/bob/shared/a/b/ckpt"}, []string{"/home/bob/shared is owned by", "uid 4242"}},
		{"bob's existing checkpoint directory", fakeHomes{"/home/alice/proj/ck": {dir, bob}},
			[]string{"--checkpoint-dir", "ck"}, []string{"/home/alice/proj/ck belongs to", "uid 4242", ", not to you (uid 1001)"}},
		{"a link at the checkpoint directory", fakeHomes{"/home/alice/proj/ck": {fs.ModeSymlink | 0o777, 1001}},
			[]string{"--checkpoint-dir", "ck"}, []string{"not a directory"}},
		{"alice's checkpoint directory", fakeHomes{"/home/alice/proj/ck": {dir, 1001}},
			[]string{"--checkpoint-dir", "ck"}, nil},
		{"output in bob's directory", fakeHomes{"/home/bob/shared": {dir, bob}},
			[]string{"--output", "/home/bob/shared/x.out"}, []string{"--output /home/bob/shared/x.out: /home/bob/shared is owned by", "uid 4242"}},
		{"bob's existing output file", fakeHomes{"/home/alice/proj/x.out": {0o666, bob}},
			[]string{"--output", "x.out"}, []string{"/home/alice/proj/x.out is owned by", "uid 4242", ", not by you (uid 1001)"}},
		{"a link at the output", fakeHomes{"/home/alice/proj/x.out": {fs.ModeSymlink | 0o777, 1001}},
			[]string{"--output", "x.out"}, []string{"/home/alice/proj/x.out is a symbolic link"}},
		{"alice's and root's files and directories", fakeHomes{"/home/alice/proj/x.out": {0o644, 0}, "/home/root": {dir, 0}},
			[]string{"--output", "x.out", "--checkpoint-dir", "/home/root/ck"}, nil},
		{"the defaults, from bob's directory", fakeHomes{"/home/alice/proj": {dir, bob}},
			nil, []string{"--checkpoint-dir /home/alice/proj/checkpoints/lab-u1001-train-abababab: /home/alice/proj is owned by", "uid 4242"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.labState()
			maps.Copy(h.homes, tt.add)
			args := append([]string{"submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/w"}, tt.args...)
			code, _, errOut := h.run(append(args, "--", "/usr/bin/python3", "train.py")...)
			switch {
			case tt.want == nil && code != 0:
				t.Errorf("exit %d: %s", code, errOut)
			case tt.want != nil && (code != ExitUsage || slices.ContainsFunc(tt.want, func(w string) bool { return !strings.Contains(errOut, w) })):
				t.Errorf("exit %d %q, want %d and each of %q", code, errOut, ExitUsage, tt.want)
			}
		})
	}
}
