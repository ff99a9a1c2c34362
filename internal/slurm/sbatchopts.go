package slurm

import (
	"fmt"
	"slices"
	"strings"
)

// ArgKind is whether an sbatch option takes a value.
type ArgKind int

const (
	ArgNone ArgKind = iota
	ArgOptional
	ArgRequired
)

// SbatchLongOptions are Slurm 22.05's sbatch long options (man sbatch,
// testdata/sbatch-22.05-options.txt, which TestSbatchOptionTable checks
// this table against). sbatch also accepts unambiguous prefixes of them
// (getopt_long; ScriptOptions resolves them as sbatch does).
var SbatchLongOptions = map[string]ArgKind{
	"account": ArgRequired, "acctg-freq": ArgRequired, "array": ArgRequired, "batch": ArgRequired, "bb": ArgRequired,
	"bbf": ArgRequired, "begin": ArgRequired, "chdir": ArgRequired, "cluster-constraint": ArgRequired, "clusters": ArgRequired,
	"comment": ArgRequired, "constraint": ArgRequired, "container": ArgRequired, "contiguous": ArgNone, "core-spec": ArgRequired,
	"cores-per-socket": ArgRequired, "cpu-freq": ArgRequired, "cpus-per-gpu": ArgRequired, "cpus-per-task": ArgRequired,
	"deadline": ArgRequired, "delay-boot": ArgRequired, "dependency": ArgRequired, "distribution": ArgRequired, "error": ArgRequired,
	"exclude": ArgRequired, "exclusive": ArgOptional, "export": ArgRequired, "export-file": ArgRequired, "extra-node-info": ArgRequired,
	"get-user-env": ArgOptional, "gid": ArgRequired, "gpu-bind": ArgRequired, "gpu-freq": ArgRequired, "gpus": ArgRequired,
	"gpus-per-node": ArgRequired, "gpus-per-socket": ArgRequired, "gpus-per-task": ArgRequired, "gres": ArgRequired,
	"gres-flags": ArgRequired, "help": ArgNone, "hint": ArgRequired, "hold": ArgNone, "ignore-pbs": ArgNone, "input": ArgRequired,
	"job-name": ArgRequired, "kill-on-invalid-dep": ArgRequired, "licenses": ArgRequired, "mail-type": ArgRequired,
	"mail-user": ArgRequired, "mcs-label": ArgRequired, "mem": ArgRequired, "mem-bind": ArgRequired, "mem-per-cpu": ArgRequired,
	"mem-per-gpu": ArgRequired, "mincpus": ArgRequired, "network": ArgRequired, "nice": ArgOptional, "no-kill": ArgOptional,
	"no-requeue": ArgNone, "nodefile": ArgRequired, "nodelist": ArgRequired, "nodes": ArgRequired, "ntasks": ArgRequired,
	"ntasks-per-core": ArgRequired, "ntasks-per-gpu": ArgRequired, "ntasks-per-node": ArgRequired, "ntasks-per-socket": ArgRequired,
	"open-mode": ArgRequired, "output": ArgRequired, "overcommit": ArgNone, "oversubscribe": ArgNone, "parsable": ArgNone,
	"partition": ArgRequired, "power": ArgRequired, "prefer": ArgRequired, "priority": ArgRequired, "profile": ArgRequired,
	"propagate": ArgOptional, "qos": ArgRequired, "quiet": ArgNone, "reboot": ArgNone, "requeue": ArgNone,
	"reservation": ArgRequired, "signal": ArgRequired, "sockets-per-node": ArgRequired, "spread-job": ArgNone,
	"switches": ArgRequired, "test-only": ArgNone, "thread-spec": ArgRequired, "threads-per-core": ArgRequired, "time": ArgRequired,
	"time-min": ArgRequired, "tmp": ArgRequired, "uid": ArgRequired, "usage": ArgNone, "use-min-nodes": ArgNone, "verbose": ArgNone,
	"version": ArgNone, "wait": ArgNone, "wait-all-nodes": ArgRequired, "wckey": ArgRequired, "wrap": ArgRequired,
}

// sbatchShortOptions are sbatch 22.05's short options (man sbatch), each
// as the long option it spells. -k (--no-kill) takes no value in a short
// spelling.
var sbatchShortOptions = map[byte]string{
	'A': "account", 'a': "array", 'b': "begin", 'D': "chdir", 'M': "clusters", 'C': "constraint", 'S': "core-spec",
	'c': "cpus-per-task", 'd': "dependency", 'm': "distribution", 'e': "error", 'x': "exclude", 'B': "extra-node-info",
	'G': "gpus", 'h': "help", 'H': "hold", 'i': "input", 'J': "job-name", 'L': "licenses", 'k': "no-kill", 'F': "nodefile",
	'w': "nodelist", 'N': "nodes", 'n': "ntasks", 'o': "output", 'O': "overcommit", 's': "oversubscribe", 'p': "partition",
	'q': "qos", 'Q': "quiet", 't': "time", 'v': "verbose", 'V': "version", 'W': "wait",
}

// ScriptOption is one option of a batch script's #SBATCH lines as sbatch
// reads it: its long name, its value, the line it is on and how it was
// written there.
type ScriptOption struct {
	Line     int
	Name     string // the long option, resolved from a prefix or a short one
	Value    string
	HasValue bool
	Written  string // as on the line: "-p gpu", "--part=gpu"
}

func (o ScriptOption) String() string {
	return fmt.Sprintf("line %d: %s", o.Line, o.Written)
}

// ScriptOptions reads a batch script's #SBATCH options as sbatch 22.05
// does (opt.c's process_batch_script with getopt_long): the lines from
// the top to the first command, split as get_argument splits them
// (quotes, backslashes, comments), then long options by full name or
// unambiguous prefix, with "=value" or the next word for a required
// value, and short options with the value attached ("-pgpu") or the next
// word. A word that is no option, an unknown or ambiguous option, or a
// missing value is an error naming its line, as sbatch refuses the
// script then.
func ScriptOptions(script []byte) ([]ScriptOption, error) {
	args, _, err := directiveArgs(script)
	if err != nil {
		return nil, err
	}
	var out []ScriptOption
	for i := 0; i < len(args); i++ {
		a := args[i]
		var next *scriptArg
		if i+1 < len(args) {
			next = &args[i+1]
		}
		var o ScriptOption
		var used bool
		switch {
		case strings.HasPrefix(a.text, "--") && len(a.text) > 2:
			o, used, err = longOption(a, next)
		case strings.HasPrefix(a.text, "-") && len(a.text) > 1:
			o, used, err = shortOption(a, next)
		default:
			err = fmt.Errorf("batch script line %d: %q is no option (sbatch refuses the script)", a.line, a.text)
		}
		if err != nil {
			return nil, err
		}
		if used {
			i++
		}
		out = append(out, o)
	}
	return out, nil
}

// longOption reads "--name[=value]", taking the next word as the value
// of an option that needs one (used).
func longOption(a scriptArg, next *scriptArg) (o ScriptOption, used bool, err error) {
	name, value, has := strings.Cut(a.text[2:], "=")
	full, kind, err := ResolveLong(name)
	if err != nil {
		return o, false, fmt.Errorf("batch script line %d: %s: %w", a.line, a.text, err)
	}
	o = ScriptOption{Line: a.line, Name: full, Value: value, HasValue: has, Written: a.text}
	switch {
	case has && kind == ArgNone:
		return o, false, fmt.Errorf("batch script line %d: %s: --%s takes no value", a.line, a.text, full)
	case !has && kind == ArgRequired:
		if next == nil {
			return o, false, fmt.Errorf("batch script line %d: %s: --%s needs a value", a.line, a.text, full)
		}
		o.Value, o.HasValue, o.Written = next.text, true, a.text+" "+next.text
		return o, true, nil
	}
	return o, false, nil
}

// shortOption reads "-X", "-Xvalue" or "-X value".
func shortOption(a scriptArg, next *scriptArg) (o ScriptOption, used bool, err error) {
	full, ok := sbatchShortOptions[a.text[1]]
	if !ok {
		return o, false, fmt.Errorf("batch script line %d: %s: sbatch has no option -%c", a.line, a.text, a.text[1])
	}
	o = ScriptOption{Line: a.line, Name: full, Written: a.text}
	if SbatchLongOptions[full] != ArgRequired {
		if len(a.text) > 2 {
			return o, false, fmt.Errorf("batch script line %d: %s: -%c takes no value (give one option a word)", a.line, a.text, a.text[1])
		}
		return o, false, nil
	}
	if len(a.text) > 2 {
		o.Value, o.HasValue = a.text[2:], true
		return o, false, nil
	}
	if next == nil {
		return o, false, fmt.Errorf("batch script line %d: %s: -%c needs a value", a.line, a.text, a.text[1])
	}
	o.Value, o.HasValue, o.Written = next.text, true, a.text+" "+next.text
	return o, true, nil
}

// ResolveLong finds the sbatch long option name stands for: itself, or
// the one option it is a prefix of (getopt_long); none or several is an
// error.
func ResolveLong(name string) (string, ArgKind, error) {
	if k, ok := SbatchLongOptions[name]; ok {
		return name, k, nil
	}
	var found []string
	for full := range SbatchLongOptions {
		if name != "" && strings.HasPrefix(full, name) {
			found = append(found, full)
		}
	}
	switch len(found) {
	case 0:
		return "", 0, fmt.Errorf("sbatch (Slurm 22.05) has no option --%s", name)
	case 1:
		return found[0], SbatchLongOptions[found[0]], nil
	}
	slices.Sort(found)
	return "", 0, fmt.Errorf("--%s is ambiguous: --%s", name, strings.Join(found, ", --"))
}
