package slurm

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// privilegedOptions are sbatch options Slurm honours only for a privileged
// submitter (root, SlurmUser, an operator): from a user they are refused
// or ignored, but in a script root submits for the user (sbatch --uid, the
// agent's resubmission of a forgotten job) they take effect. The value
// says which values are privileged ("" any). Slurm 22.05's
// validate_job_create_req (slurmctld/job_mgr.c) checks priority, a
// negative nice, the admin comment and reboot against the submitter, not
// the job's user; --uid and --gid choose the user.
var privilegedOptions = map[string]func(value string, hasValue bool) bool{
	"priority": func(string, bool) bool { return true },
	// a negative nice raises the job over everyone else's; 0 and more are
	// any user's
	"nice":   negativeNice,
	"uid":    func(string, bool) bool { return true },
	"gid":    func(string, bool) bool { return true },
	"reboot": func(string, bool) bool { return true },
}

// negativeNice is whether a nice value needs privilege: a negative one,
// or one that is not a plain number (Slurm's strtol takes "-5x" as -5).
func negativeNice(v string, has bool) bool {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return has && (err != nil || n < 0)
}

// scriptArg is one argument of a directive line, as sbatch splits it, with
// its line number (1-based).
type scriptArg struct {
	line int
	text string
}

func (a scriptArg) String() string { return fmt.Sprintf("line %d: %s", a.line, a.text) }

// PrivilegedDirectives returns the options of a batch script that need
// privilege (see privilegedOptions), each as "line N: option" with the
// option as sbatch reads it (quotes and backslashes taken away). It reads
// the script as sbatch 22.05 does (src/sbatch/opt.c, xlate.c):
//   - "#SBATCH" (or "#SLURM") lines from the top of the script to the first
//     line that is neither a comment nor blank, each split by get_argument:
//     quotes group, a backslash escapes the next character, an unquoted
//     "#" starts a comment; every line's arguments form one argument list;
//     getopt_long takes any unambiguous prefix of a long option, so a name
//     that is a prefix of a privileged option counts as it (an ambiguous
//     one fails in sbatch anyway);
//   - unless ignorePBS (sbatch --ignore-pbs), "#PBS" lines anywhere in the
//     first hundred lines that are not comments: -p and --priority become
//     --nice, and -l's nice= too. "#BSUB" lines translate to no
//     privileged option.
//
// An unmatched quote, which makes sbatch refuse the script, is an error.
// Refusing more than sbatch would grant is safe: a directive line that is
// indented, or follows a word sbatch would stop at, counts too.
func PrivilegedDirectives(script []byte, ignorePBS bool) ([]string, error) {
	sb, pbs, err := directiveArgs(script)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, a := range sb {
		if privilegedLong(a.text) {
			found = append(found, a.String())
		}
	}
	if !ignorePBS {
		found = append(found, privilegedPBS(pbs)...)
	}
	return found, nil
}

// HasPBSDirectives says whether sbatch, unless told --ignore-pbs, would
// translate directives of another batch system ("#PBS" or "#BSUB" lines)
// in script.
func HasPBSDirectives(script []byte) bool {
	for _, line := range bytes.Split(script, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("#PBS")) || bytes.HasPrefix(line, []byte("#BSUB")) {
			return true
		}
	}
	return false
}

// privilegedLong reports whether one #SBATCH argument is a privileged
// long option.
func privilegedLong(arg string) bool {
	opt, ok := strings.CutPrefix(arg, "--")
	if !ok || opt == "" {
		return false
	}
	name, value, hasValue := strings.Cut(opt, "=")
	for full, priv := range privilegedOptions {
		if strings.HasPrefix(full, name) && priv(value, hasValue) {
			return true
		}
	}
	return false
}

// maxPBSNonComments is where sbatch stops looking for #PBS lines
// (xlate_batch_script: more than 100 lines not starting with '#').
const maxPBSNonComments = 100

// directiveArgs splits the #SBATCH lines (to the first command) and the
// #PBS lines (within the first lines that are not comments) into
// arguments.
func directiveArgs(script []byte) (sbatch, pbs []scriptArg, err error) {
	sc := bufio.NewScanner(bytes.NewReader(script))
	sc.Buffer(make([]byte, 64<<10), MaxBatchScript)
	inSbatch, nonComments := true, 0
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if rest, ok := sbatchDirective(line); ok && inSbatch {
			args, err := splitDirective(n, rest, true)
			if err != nil {
				return nil, nil, err
			}
			sbatch = append(sbatch, args...)
		} else if isCommand(line) {
			inSbatch = false
		}
		if rest, ok := strings.CutPrefix(line, "#PBS"); ok && nonComments <= maxPBSNonComments {
			args, err := splitDirective(n, rest, false)
			if err != nil {
				return nil, nil, err
			}
			pbs = append(pbs, args...)
		}
		if !strings.HasPrefix(line, "#") {
			nonComments++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("batch script: %w", err)
	}
	return sbatch, pbs, nil
}

// sbatchDirective returns what follows the magic word of an #SBATCH (or
// #SLURM) line. sbatch takes them at the line's start only; an indented
// one is taken too (refusing more is safe).
func sbatchDirective(line string) (string, bool) {
	t := strings.TrimLeft(line, cSpace)
	for _, magic := range []string{"#SBATCH", "#SLURM"} {
		if rest, ok := strings.CutPrefix(t, magic); ok {
			return rest, true
		}
	}
	return "", false
}

// isCommand is whether a line ends sbatch's reading of #SBATCH lines: its
// first character that is not a space is not '#'.
func isCommand(line string) bool {
	t := strings.TrimLeft(line, cSpace)
	return t != "" && t[0] != '#'
}

// cSpace is C's isspace.
const cSpace = " \t\n\v\f\r"

// splitDirective splits the rest of a directive line as sbatch's
// get_argument does. hetjob drops the hetjob (packjob) separator word that
// starts an #SBATCH line.
func splitDirective(line int, s string, hetjob bool) ([]scriptArg, error) {
	var args []scriptArg
	for first := true; ; first = false {
		s = strings.TrimLeft(s, cSpace)
		if hetjob && first {
			s = dropSeparator(s)
		}
		if s == "" {
			return args, nil
		}
		arg, rest, comment, err := nextArgument(s)
		if err != nil {
			return nil, fmt.Errorf("batch script line %d: %w", line, err)
		}
		if arg != "" {
			args = append(args, scriptArg{line: line, text: arg})
		}
		if comment {
			return args, nil
		}
		s = rest
	}
}

// dropSeparator removes a leading "hetjob" or "packjob" word (any case).
func dropSeparator(s string) string {
	for _, w := range []string{"hetjob", "packjob"} {
		if len(s) >= len(w) && strings.EqualFold(s[:len(w)], w) && (len(s) == len(w) || strings.ContainsRune(cSpace, rune(s[len(w)]))) {
			return s[len(w):]
		}
	}
	return s
}

// nextArgument reads one argument from s (which starts with no space):
// quotes group and are dropped, a backslash escapes the next character, an
// unquoted '#' ends the line (comment is then true).
func nextArgument(s string) (arg, rest string, comment bool, err error) {
	var b strings.Builder
	var quote byte
	escaped := false
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
			continue
		case quote != 0:
			if c == quote {
				quote = 0
				continue
			}
		case c == '"' || c == '\'':
			quote = c
			continue
		case c == '#':
			return b.String(), "", true, nil
		case strings.IndexByte(cSpace, c) >= 0:
			return b.String(), s[i:], false, nil
		}
		b.WriteByte(c)
	}
	if quote != 0 {
		return "", "", false, fmt.Errorf("unmatched %c (sbatch refuses the script)", quote)
	}
	return b.String(), "", false, nil
}

// pbsArgOptions are the short options of sbatch's #PBS translation that
// take an argument (xlate.c's "+a:A:c:C:e:hIj:J:k:l:m:M:N:o:p:q:r:S:t:u:v:VW:z").
const pbsArgOptions = "aAcCejJklmMNopqrStuvW"

// privilegedPBS walks #PBS arguments as getopt_long does with xlate.c's
// option table and returns those that become a negative nice: -p VALUE
// and --priority (translated to --nice), -l and --resource_list with
// nice=VALUE. getopt stops at "--"; it stops at the first word that is no
// option too, and sbatch then refuses the script: the walk goes on there
// (refusing more is safe).
func privilegedPBS(args []scriptArg) []string {
	var found []string
	for i := 0; i < len(args); i++ {
		a := args[i].text
		if a == "--" {
			break
		}
		opt, value, consumed := pbsOption(args, i)
		i += consumed
		if (opt == 'p' && negativeNice(value, true)) || (opt == 'l' && pbsResourceNice(value)) {
			found = append(found, fmt.Sprintf("line %d: #PBS %s", args[i-consumed].line, strings.Join(texts(args[i-consumed:i+1]), " ")))
		}
	}
	return found
}

// pbsOption reads the option at args[i]: 'p' or 'l' with its value (for
// other options 0), and how many following arguments it took as its
// value.
func pbsOption(args []scriptArg, i int) (opt byte, value string, consumed int) {
	a := args[i].text
	next := func() (string, int) {
		if i+1 < len(args) {
			return args[i+1].text, 1
		}
		return "", 0
	}
	if long, ok := strings.CutPrefix(a, "--"); ok {
		return pbsLongOption(long, next)
	}
	if len(a) < 2 || a[0] != '-' {
		return 0, "", 0
	}
	// a cluster of short options: the first that takes an argument takes
	// the rest of the word, or the next word
	for j := 1; j < len(a); j++ {
		c := a[j]
		if strings.IndexByte(pbsArgOptions, c) < 0 {
			continue
		}
		v := a[j+1:]
		if v == "" {
			v, consumed = next()
		}
		if c == 'p' || c == 'l' {
			return c, v, consumed
		}
		return 0, "", consumed
	}
	return 0, "", 0
}

// pbsLongOption is pbsOption for "--"+long; next is the following
// argument, if any, and 1 (0 when there is none).
func pbsLongOption(long string, next func() (string, int)) (opt byte, value string, consumed int) {
	name, v, has := strings.Cut(long, "=")
	for full, o := range map[string]byte{"priority": 'p', "resource_list": 'l'} {
		if name != "" && strings.HasPrefix(full, name) {
			if !has {
				v, consumed = next()
			}
			return o, v, consumed
		}
	}
	// another long option: all of xlate.c's but join take an argument
	if !has && name != "join" && !strings.HasPrefix("hold", name) && !strings.HasPrefix("interactive", name) &&
		!strings.HasPrefix("all_env", name) && !strings.HasPrefix("no_std", name) {
		_, consumed = next()
	}
	return 0, "", consumed
}

// pbsResourceNice is whether a PBS resource list asks for a privileged
// nice. xlate.c matches "nice=" after a ',' or after values it splits at
// ':', and reads the value to the next ','; any "nice=" counts here.
func pbsResourceNice(rl string) bool {
	for rest := rl; ; {
		_, after, ok := strings.Cut(rest, "nice=")
		if !ok {
			return false
		}
		v, _, _ := strings.Cut(after, ",")
		if negativeNice(v, true) {
			return true
		}
		rest = after
	}
}

func texts(args []scriptArg) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a.text
	}
	return out
}
