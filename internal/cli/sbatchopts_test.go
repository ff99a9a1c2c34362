package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/isched/isched/internal/slurm"
)

// TestOwnedOptions: every option isched owns is an sbatch option, and
// every one dropped from the environment says why.
func TestOwnedOptions(t *testing.T) {
	t.Parallel()
	for name := range envOwned {
		if iSchedOwned[name] == "" {
			t.Errorf("--%s: dropped from the environment without a reason", name)
		}
	}
	for name := range iSchedOwned {
		if _, ok := slurm.SbatchLongOptions[name]; !ok {
			t.Errorf("owned option --%s is no sbatch option", name)
		}
	}
}

func TestParseSbatchArg(t *testing.T) {
	t.Parallel()
	ok := []struct {
		in   string
		want Directive
	}{
		{"--exclusive", Directive{Name: "exclusive"}},
		{"--exclusive=user", Directive{Name: "exclusive", Value: "user", HasValue: true}},
		{"--reservation=maint_1", Directive{Name: "reservation", Value: "maint_1", HasValue: true}},
		{"--dependency=afterok:123:456", Directive{Name: "dependency", Value: "afterok:123:456", HasValue: true}},
		{"--nodelist=gpu[1-2]", Directive{Name: "nodelist", Value: "gpu[1-2]", HasValue: true}},
		{"--begin=now+1hour", Directive{Name: "begin", Value: "now+1hour", HasValue: true}},
		{"--hold", Directive{Name: "hold"}},
	}
	for _, tt := range ok {
		got, err := parseSbatchArg(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("%q: got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	bad := []struct{ in, why string }{
		{"-p gpu", "short options"},
		{"--partition=gpu", "isched sets --partition"},
		{"--part=gpu", "no option --part"}, // a getopt abbreviation of --partition
		{"--time=10", "isched sets --time"},
		{"--mem-per-cpu=4G", "isched sets --mem-per-cpu"},
		{"--gpus=2", "isched sets --gpus"},
		{"--account=a", "use --account"},
		{"--error=/home/a/err-%j.txt", "use --error"}, // its own flag, checked as --output is
		{"--wait", "isched submits and returns"},
		{"--array=1-4", "use --array"},
		{"--export=ALL", "use --export"},
		{"--no-requeue", "isched sets --no-requeue"},
		{"--signal=B:USR2@60", "isched sets --signal"},
		{"--exclusive=user\n#SBATCH --partition=gpu", "the value may hold"},
		{"--reservation=a b", "the value may hold"},
		{"--reservation=a#b", "the value may hold"},
		{"--reservation=$(id)", "the value may hold"},
		{`--reservation="x"`, "the value may hold"},
		{"--reservation=" + strings.Repeat("a", 1025), "the value may hold"},
		{"--reservation", "needs a value"},
		{"--hold=yes", "takes no value"},
		{"--Exclusive", "not an option name"},
		{"--", "not an option name"},
		{"--nosuch=1", "no option --nosuch"},
	}
	for _, tt := range bad {
		_, err := parseSbatchArg(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("%q: error %v, want one containing %q", tt.in, err, tt.why)
		}
	}
}

func TestSiteOptsDirectives(t *testing.T) {
	t.Parallel()
	s := siteOpts{account: "physics", qos: "high", mailType: "end,FAIL", mailUser: "alice@example.org", constraint: "a100|h100",
		nodes: "1-2", ntasks: 4, sbatchArgs: listFlag{"--exclusive", "--reservation=r1"}}
	got, err := s.directives()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, d := range got {
		lines = append(lines, d.String())
	}
	want := []string{"--account=physics", "--qos=high", "--mail-type=END,FAIL", "--mail-user=alice@example.org", "--constraint=a100|h100",
		"--exclusive", "--reservation=r1"}
	if !slices.Equal(lines, want) {
		t.Errorf("got %q\nwant %q", lines, want)
	}
	bad := []struct {
		s   siteOpts
		why string
	}{
		{siteOpts{account: "a\n#SBATCH --partition=gpu"}, "--account"},
		{siteOpts{account: "a b"}, "--account"},
		{siteOpts{qos: "-x"}, "--qos"},
		{siteOpts{mailType: "END,SOMETIMES"}, `"SOMETIMES" is not one of`},
		{siteOpts{mailUser: "a@b c"}, "--mail-user"},
		{siteOpts{constraint: "a b"}, "--constraint"},
		{siteOpts{constraint: "a#b"}, "--constraint"},
		{siteOpts{nodes: "0"}, "--nodes"},
		{siteOpts{nodes: "3-2"}, "minimum is above"},
		{siteOpts{nodes: "2;x"}, "--nodes"},
		{siteOpts{ntasks: -1}, "--ntasks"},
		{siteOpts{sbatchArgs: listFlag{"--hold", "--hold"}}, "given twice"},
	}
	for _, tt := range bad {
		_, err := tt.s.directives()
		if err == nil || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("%+v: error %v, want one containing %q", tt.s, err, tt.why)
		}
	}
}

func TestSbatchEnv(t *testing.T) {
	t.Parallel()
	environ := []string{"HOME=/home/a", "SBATCH_ACCOUNT=envacct", "SBATCH_PARTITION=gpu", "SBATCH_TIMELIMIT=10", "SBATCH_MEM_PER_CPU=2G",
		"SBATCH_GPUS=2", "SBATCH_RESERVATION=maint", "SBATCH_WAIT=1", "SBATCH_EXPORT=ALL", "SBATCH_NO_REQUEUE=1", "SBATCH_QOS=high",
		"SBATCH_CLUSTERS=other", "SLURM_CONF=/x"}
	script := []string{"job-name", "partition", "gres", "nodes", "ntasks", "mem", "time", "requeue", "signal", "open-mode", "output", "chdir", "comment", "qos"}
	keep, dropped, err := sbatchEnv(environ, script)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"SBATCH_ACCOUNT=envacct", "SBATCH_RESERVATION=maint"}; !slices.Equal(keep, want) {
		t.Errorf("kept %q, want %q", keep, want)
	}
	for _, want := range []string{"SBATCH_PARTITION ignored: the script sets --partition", "SBATCH_TIMELIMIT ignored: the script sets --time",
		"SBATCH_MEM_PER_CPU ignored: the script sets --mem-per-cpu", "SBATCH_GPUS ignored: the script sets --gpus",
		"SBATCH_WAIT ignored: isched submits and returns", "SBATCH_EXPORT=ALL: taken as --export", "SBATCH_NO_REQUEUE ignored",
		"SBATCH_QOS ignored: the script sets --qos", "SBATCH_CLUSTERS ignored"} {
		if !slices.ContainsFunc(dropped, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Errorf("no note %q in %q", want, dropped)
		}
	}
	// without a --gres line a CPU job still may not get GPUs from the environment
	keep, _, _ = sbatchEnv([]string{"SBATCH_GPUS=1", "SBATCH_MEM_PER_CPU=1G"}, []string{"partition"})
	if !slices.Equal(keep, []string{"SBATCH_MEM_PER_CPU=1G"}) {
		t.Errorf("no --gres/--mem line: kept %q", keep)
	}
	if _, _, err := sbatchEnv([]string{"SBATCH_ACCOUNT=a\nb"}, nil); err == nil || !strings.Contains(err.Error(), "SBATCH_ACCOUNT") {
		t.Errorf("control character: %v", err)
	}
}

// TestSubmitSiteOptions: the done-when of the site options — --account,
// --qos and --sbatch-arg=--exclusive in the dry run's script — and the
// environment passed to sbatch on a real submission.
func TestSubmitSiteOptions(t *testing.T) {
	h := newHarness(t)
	h.labState()
	h.env["SBATCH_ACCOUNT"] = "envacct"    // the flag beats it
	h.env["SBATCH_PARTITION"] = "gpu"      // isched's partition wins
	h.env["SBATCH_RESERVATION"] = "maint1" // passed on
	args := []string{"submit", "--partition-ideal", "cpu", "--wrapper", "/opt/isched/bin/isched-wrapper",
		"--account", "A", "--qos", "Q", "--sbatch-arg=--exclusive", "--mail-type", "END", "--mail-user", "alice",
		"--constraint", "cpu", "--nodes", "2", "--ntasks", "2", "--checkpoint-dir", filepath.Join(h.dir, "ckpt"), "--", "python3", "train.py"}
	code, out, errOut := h.run(append([]string{args[0], "--dry-run"}, args[1:]...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"#SBATCH --account=A\n", "#SBATCH --qos=Q\n", "#SBATCH --exclusive\n", "#SBATCH --mail-type=END\n",
		"#SBATCH --mail-user=alice\n", "#SBATCH --constraint=cpu\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks=2\n", "#SBATCH --partition=cpu\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"SBATCH_ACCOUNT ignored: the script sets --account", "SBATCH_PARTITION ignored: the script sets --partition",
		"with SBATCH_RESERVATION=maint1 from your environment"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code, _, errOut := h.run(args...); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	if got := h.slurm.specs[0].Env; !slices.Equal(got, []string{"SBATCH_RESERVATION=maint1"}) {
		t.Errorf("sbatch environment %q", got)
	}
	// refused before anything is written or run
	for _, bad := range [][]string{{"--sbatch-arg=--partition=gpu"}, {"--account", "a\n#SBATCH --uid=0"}, {"--sbatch-arg=-p"}} {
		code, _, errOut := h.run(append(append([]string{"submit", "--dry-run", "--partition-ideal", "cpu", "--wrapper", "/w"}, bad...), "--", "x")...)
		if code != ExitUsage || !strings.Contains(errOut, "isched submit: ") {
			t.Errorf("%q: exit %d: %s", bad, code, errOut)
		}
	}
}
