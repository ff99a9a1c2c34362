package slurm

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
)

// privilegedOptions are sbatch options Slurm honours only for a privileged
// submitter (root, SlurmUser, an operator): from a user they are refused
// or ignored, but in a script root submits for the user (sbatch --uid, the
// agent's resubmission of a forgotten job) they take effect. The value
// says which values are privileged ("" any).
var privilegedOptions = map[string]func(value string, hasValue bool) bool{
	"priority": func(string, bool) bool { return true },
	// a negative nice raises the job over everyone else's; 0 and more are
	// any user's
	"nice": func(v string, has bool) bool {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return has && (err != nil || n < 0)
	},
	"uid":    func(string, bool) bool { return true },
	"gid":    func(string, bool) bool { return true },
	"reboot": func(string, bool) bool { return true },
}

// PrivilegedDirectives returns the #SBATCH options of a batch script that
// need privilege (see privilegedOptions), as written. sbatch reads
// "#SBATCH" lines from the top of the script to the first line that is
// neither a comment nor blank, and takes any unambiguous prefix of a long
// option (getopt_long): a name that is a prefix of a privileged option
// counts as it (an ambiguous one fails in sbatch anyway).
func PrivilegedDirectives(script []byte) []string {
	var found []string
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first && strings.HasPrefix(line, "#!") {
			first = false
			continue
		}
		first = false
		// an indented #SBATCH is taken as one too: refusing more is safe
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "#SBATCH") {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				continue
			}
			break // the script's first command: sbatch reads no further
		}
		found = append(found, privilegedIn(strings.Fields(trimmed[len("#SBATCH"):]))...)
	}
	return found
}

// privilegedIn checks the options of one #SBATCH line.
func privilegedIn(words []string) []string {
	var found []string
	for _, w := range words {
		if strings.HasPrefix(w, "#") {
			break // a comment after the options
		}
		opt, ok := strings.CutPrefix(w, "--")
		if !ok || opt == "" {
			continue
		}
		name, value, hasValue := strings.Cut(opt, "=")
		for full, priv := range privilegedOptions {
			if strings.HasPrefix(full, name) && priv(value, hasValue) {
				found = append(found, w)
				break
			}
		}
	}
	return found
}
