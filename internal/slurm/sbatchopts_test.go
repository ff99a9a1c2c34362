package slurm

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestSbatchOptionTable checks the option tables against Slurm 22.05's
// own list (the OPTIONS headings of man sbatch, captured from
// slurm-client 22.05.8): the same long names, the same "takes a value",
// the same short spellings.
func TestSbatchOptionTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/sbatch-22.05-options.txt")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^(?:-([A-Za-z0-9]), )?--([a-z][a-z0-9-]*)(\[=|=)?`)
	seen, shorts := map[string]bool{}, map[byte]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("testdata line %q", line)
		}
		want := ArgNone
		switch m[3] {
		case "=":
			want = ArgRequired
		case "[=":
			want = ArgOptional
		}
		seen[m[2]] = true
		if m[1] != "" {
			shorts[m[1][0]] = m[2]
		}
		got, ok := SbatchLongOptions[m[2]]
		if !ok {
			t.Errorf("--%s missing from the table", m[2])
		} else if got != want {
			t.Errorf("--%s: kind %d, man page says %d", m[2], got, want)
		}
	}
	for name := range SbatchLongOptions {
		if !seen[name] {
			t.Errorf("--%s is in the table, not in sbatch 22.05", name)
		}
	}
	if !reflect.DeepEqual(shorts, sbatchShortOptions) {
		t.Errorf("short options %v, man page %v", sbatchShortOptions, shorts)
	}
}

// TestScriptOptions reads #SBATCH lines as sbatch does: long and short
// spellings, attached and separate values, prefixes, quotes, comments,
// and the first command ends them.
func TestScriptOptions(t *testing.T) {
	t.Parallel()
	script := `#!/bin/bash -l
# a comment
#SBATCH --partition=gpu
#SBATCH -p gpu2 -t 4:00:00
#SBATCH --gres gpu:a100:2   # two A100s
#SBATCH -c8 --mem-per-gpu=40G
#SBATCH --job-name="my run" --exclusive
#SBATCH --part=gpu3
#SBATCH -G a100:1 -N 1
#SBATCH --nice

module load cuda
#SBATCH --time=9:00:00
python train.py
`
	got, err := ScriptOptions([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	want := []ScriptOption{
		{3, "partition", "gpu", true, "--partition=gpu"},
		{4, "partition", "gpu2", true, "-p gpu2"},
		{4, "time", "4:00:00", true, "-t 4:00:00"},
		{5, "gres", "gpu:a100:2", true, "--gres gpu:a100:2"},
		{6, "cpus-per-task", "8", true, "-c8"},
		{6, "mem-per-gpu", "40G", true, "--mem-per-gpu=40G"},
		{7, "job-name", "my run", true, "--job-name=my run"},
		{7, "exclusive", "", false, "--exclusive"},
		{8, "partition", "gpu3", true, "--part=gpu3"},
		{9, "gpus", "a100:1", true, "-G a100:1"},
		{9, "nodes", "1", true, "-N 1"},
		{10, "nice", "", false, "--nice"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

func TestScriptOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ script, want string }{
		{"#SBATCH --pa=gpu\n", "line 1: --pa=gpu: --pa is ambiguous: --parsable, --partition"},
		{"#!/bin/sh\n#SBATCH --gpu=1\n", "line 2: --gpu=1: --gpu is ambiguous"},
		{"#SBATCH --frobnicate\n", "line 1: --frobnicate: sbatch (Slurm 22.05) has no option --frobnicate"},
		{"#SBATCH -Z 3\n", "line 1: -Z: sbatch has no option -Z"},
		{"#SBATCH --time\n", "line 1: --time: --time needs a value"},
		{"#SBATCH -t\n", "line 1: -t: -t needs a value"},
		{"#SBATCH --hold=yes\n", "line 1: --hold=yes: --hold takes no value"},
		{"#SBATCH -Hx\n", "-H takes no value"},
		{"#SBATCH gpu\n", `line 1: "gpu" is no option`},
		{"#SBATCH --job-name='x\n", "line 1: unmatched '"},
	} {
		if _, err := ScriptOptions([]byte(tc.script)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want ~%q", tc.script, err, tc.want)
		}
	}
}
