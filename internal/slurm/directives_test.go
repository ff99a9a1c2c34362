package slurm

import (
	"slices"
	"strings"
	"testing"
)

func TestPrivilegedDirectives(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, script string
		ignorePBS    bool
		want         []string
	}{
		{"isched's own script", "#!/bin/bash\n# plan\n#SBATCH --job-name=train\n#SBATCH --partition=cpu\n#SBATCH --requeue\n#SBATCH --signal=USR1@135\n" +
			"#SBATCH --nice=10\n#SBATCH --nice\n\nset -eu\nexec srun x\n", false, nil},
		{"priority and a negative nice", "#!/bin/bash\n#SBATCH --priority=4000000\n#SBATCH --nice=-10000\n", false,
			[]string{"line 2: --priority=4000000", "line 3: --nice=-10000"}},
		{"prefixes, as getopt_long takes them", "#!/bin/sh\n#SBATCH --prio=9 --ni=-5\n#SBATCH --reb\n", false,
			[]string{"line 2: --prio=9", "line 2: --ni=-5", "line 3: --reb"}},
		{"several on one line, uid and gid", "#!/bin/sh\n#SBATCH -p cpu --uid=0 --gid=0 -t 1\n", false, []string{"line 2: --uid=0", "line 2: --gid=0"}},
		{"after the first command sbatch reads none", "#!/bin/sh\n#SBATCH -p cpu\necho hi\n#SBATCH --priority=1\n", false, nil},
		{"blank lines and comments before it do not stop it", "#!/bin/sh\n\n# a comment\n   \n#SBATCH --priority=1\n", false, []string{"line 5: --priority=1"}},
		{"a comment after the options", "#!/bin/sh\n#SBATCH -p cpu # --priority=1\n", false, nil},
		{"a comment glued to an option", "#!/bin/sh\n#SBATCH -p cpu#--priority=1\n", false, nil},
		{"an indented #SBATCH counts too (refusing more is safe)", "#!/bin/sh\n  #SBATCH --priority=1\n", false, []string{"line 2: --priority=1"}},
		{"a nice that is not a number", "#!/bin/sh\n#SBATCH --nice=x\n", false, []string{"line 2: --nice=x"}},
		// the spellings of issue 44, each measured honoured by Slurm 22.05
		// in a script root submitted with --uid=bob
		{"double quotes", "#!/bin/sh\n#SBATCH \"--priority=4000000\"\n", false, []string{"line 2: --priority=4000000"}},
		{"single quotes", "#!/bin/sh\n#SBATCH '--nice=-10000'\n", false, []string{"line 2: --nice=-10000"}},
		{"a backslash inside the name", "#!/bin/sh\n#SBATCH --pr\\iority=3000000\n", false, []string{"line 2: --priority=3000000"}},
		{"quotes inside the word", "#!/bin/sh\n#SBATCH --ni'ce=-5' --\"uid\"=0\n", false, []string{"line 2: --nice=-5", "line 2: --uid=0"}},
		{"a quoted space in the value", "#!/bin/sh\n#SBATCH \"--nice= -7\"\n", false, []string{"line 2: --nice= -7"}},
		{"no space after the magic word", "#!/bin/sh\n#SBATCH--priority=2\n", false, []string{"line 2: --priority=2"}},
		{"#SLURM is read too", "#!/bin/sh\n#SLURM --priority=2\n", false, []string{"line 2: --priority=2"}},
		{"a hetjob separator", "#!/bin/sh\n#SBATCH -p cpu\n#SBATCH hetjob --priority=2\n", false, []string{"line 3: --priority=2"}},
		{"an escaped # is no comment", "#!/bin/sh\n#SBATCH -J a\\# --priority=2\n", false, []string{"line 2: --priority=2"}},
		{"a tab and a carriage return", "#!/bin/sh\r\n#SBATCH\t--nice=-3\r\n", false, []string{"line 2: --nice=-3"}},
		{"#PBS -p", "#!/bin/sh\n#PBS -p -10000\n", false, []string{"line 2: #PBS -p -10000"}},
		{"#PBS -p attached, in a cluster", "#!/bin/sh\n#PBS -hp-9\n", false, []string{"line 2: #PBS -hp-9"}},
		{"#PBS --priority prefix", "#!/bin/sh\n#PBS --prio=-8\n", false, []string{"line 2: #PBS --prio=-8"}},
		{"#PBS -l nice=", "#!/bin/sh\n#PBS -l nice=-9000\n", false, []string{"line 2: #PBS -l nice=-9000"}},
		{"#PBS -l nice= among resources", "#!/bin/sh\n#PBS -l walltime=1:00:00,ncpus=2:nice=-1\n", false, []string{"line 2: #PBS -l walltime=1:00:00,ncpus=2:nice=-1"}},
		{"#PBS lines are read after the first command", "#!/bin/sh\necho hi\n#PBS -lnice=-9\n", false, []string{"line 3: #PBS -lnice=-9"}},
		{"#PBS priority that is any user's", "#!/bin/sh\n#PBS -p 100 -l nice=5,walltime=10:00\n", false, nil},
		{"#PBS -N takes the next word, -p there is a name", "#!/bin/sh\n#PBS -N -p\n", false, nil},
		{"#PBS -Np- is a job name", "#!/bin/sh\n#PBS -Nmyjob_pool\n", false, nil},
		{"#PBS lines with --ignore-pbs", "#!/bin/sh\n#PBS -p -10000\n#PBS -l nice=-9000\n", true, nil},
		{"#BSUB has no privileged option", "#!/bin/sh\n#BSUB -q gpu -n 2 -x\n", false, nil},
	} {
		got, err := PrivilegedDirectives([]byte(tt.script), tt.ignorePBS)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestPrivilegedDirectivesUnmatchedQuote(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"#!/bin/sh\n#SBATCH \"--priority=4\n", "#!/bin/sh\n#PBS -p '-5\n"} {
		_, err := PrivilegedDirectives([]byte(script), false)
		if err == nil || !strings.Contains(err.Error(), "line 2: unmatched") {
			t.Errorf("%q: %v, want an unmatched quote on line 2", script, err)
		}
	}
}

func TestHasPBSDirectives(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]bool{
		"#!/bin/sh\n#SBATCH -p cpu\necho\n": false,
		"#!/bin/sh\n#PBS -q x\n":            true,
		"#!/bin/sh\necho\n#BSUB -n 2\n":     true,
		"#!/bin/sh\n # PBS\n  #PBS -q x\n":  false, // not at the line's start: a comment for sbatch
	} {
		if got := HasPBSDirectives([]byte(script)); got != want {
			t.Errorf("%q: %v, want %v", script, got, want)
		}
	}
}

func FuzzPrivilegedDirectives(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n#SBATCH \"--prio\\rity=1\" '--nice=-5'\n#PBS -hp -3 -l nice=-1\n"), false)
	f.Fuzz(func(t *testing.T, script []byte, ignorePBS bool) {
		got, err := PrivilegedDirectives(script, ignorePBS)
		if err == nil && ignorePBS {
			for _, g := range got {
				if strings.Contains(g, "#PBS") {
					t.Fatalf("a #PBS line with ignorePBS: %q", g)
				}
			}
		}
	})
}
