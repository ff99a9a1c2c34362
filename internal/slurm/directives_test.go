package slurm

import (
	"slices"
	"testing"
)

func TestPrivilegedDirectives(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, script string
		want         []string
	}{
		{"isched's own script", "#!/bin/bash\n# plan\n#SBATCH --job-name=train\n#SBATCH --partition=cpu\n#SBATCH --requeue\n#SBATCH --signal=USR1@135\n" +
			"#SBATCH --nice=10\n#SBATCH --nice\n\nset -eu\nexec srun x\n", nil},
		{"priority and a negative nice", "#!/bin/bash\n#SBATCH --priority=4000000\n#SBATCH --nice=-10000\n", []string{"--priority=4000000", "--nice=-10000"}},
		{"prefixes, as getopt_long takes them", "#!/bin/sh\n#SBATCH --prio=9 --ni=-5\n#SBATCH --reb\n", []string{"--prio=9", "--ni=-5", "--reb"}},
		{"several on one line, uid and gid", "#!/bin/sh\n#SBATCH -p cpu --uid=0 --gid=0 -t 1\n", []string{"--uid=0", "--gid=0"}},
		{"after the first command sbatch reads none", "#!/bin/sh\n#SBATCH -p cpu\necho hi\n#SBATCH --priority=1\n", nil},
		{"blank lines and comments before it do not stop it", "#!/bin/sh\n\n# a comment\n   \n#SBATCH --priority=1\n", []string{"--priority=1"}},
		{"a comment after the options", "#!/bin/sh\n#SBATCH -p cpu # --priority=1\n", nil},
		{"an indented #SBATCH counts too (refusing more is safe)", "#!/bin/sh\n  #SBATCH --priority=1\n", []string{"--priority=1"}},
		{"a nice that is not a number", "#!/bin/sh\n#SBATCH --nice=x\n", []string{"--nice=x"}},
	} {
		if got := PrivilegedDirectives([]byte(tt.script)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
