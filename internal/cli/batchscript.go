package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/isched/isched/internal/child"
	"github.com/isched/isched/internal/slurm"
	"github.com/spf13/pflag"
)

// A user's batch script is a request: `isched submit job.sbatch ARGS` (or
// `-- bash job.sbatch ARGS`) reads the script's #SBATCH lines as sbatch
// does (slurm.ScriptOptions), then the SBATCH_* variables over them, then
// the command line's flags over both, and takes them as the request:
// partition and GPUs as the ideal, time, memory, CPUs, tasks and nodes,
// the site's options. The script itself runs unmodified under the wrapper,
// in the batch step (its own srun lines start its steps). Each option is
// honoured or refused with its line: nothing is dropped silently.

// batchScript is a batch script named by the command.
type batchScript struct {
	path string   // as the command names it
	cmd  []string // the command that runs it: its interpreter, the path, its arguments
	opts []slurm.ScriptOption
	// envTaken are the SBATCH_* variables taken into the request.
	envTaken map[string]bool
}

// tookEnv says whether a note of sbatchEnv's on a dropped variable ("NAME
// ignored: ...", "NAME=value: ...") is about a variable the request took.
func (bs *batchScript) tookEnv(note string) bool {
	if bs == nil {
		return false
	}
	name := note[:strings.IndexAny(note+" ", " =")]
	return bs.envTaken[name]
}

// findBatchScript returns the batch script the command runs, or nil: argv
// names a file that starts with "#!" and has #SBATCH options, directly or
// after bash or sh. A script without #SBATCH lines is a plain command.
func findBatchScript(argv []string, dir string, read func(string) ([]byte, error)) (*batchScript, error) {
	at := 0
	if len(argv) > 1 && (filepath.Base(argv[0]) == "bash" || filepath.Base(argv[0]) == "sh") && !strings.HasPrefix(argv[1], "-") {
		at = 1
	}
	if len(argv) == 0 || strings.HasPrefix(argv[at], "-") {
		return nil, nil
	}
	p := argv[at]
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	b, err := read(p)
	if err != nil || !bytes.HasPrefix(b, []byte("#!")) || !bytes.Contains(b, []byte("#SBATCH")) && !bytes.Contains(b, []byte("#SLURM")) {
		return nil, nil // not a batch script here: the command as given
	}
	opts, err := slurm.ScriptOptions(b)
	if err != nil {
		return nil, usageErr("%s: %v", argv[at], err)
	}
	if len(opts) == 0 {
		return nil, nil
	}
	if slurm.HasPBSDirectives(b) {
		return nil, usageErr("%s: #PBS or #BSUB lines: isched reads only #SBATCH lines (write them as #SBATCH)", argv[at])
	}
	cmd := argv
	if at == 0 {
		first, _, _ := bytes.Cut(b, []byte("\n"))
		interp := strings.Fields(string(bytes.TrimPrefix(first, []byte("#!"))))
		if len(interp) == 0 {
			return nil, usageErr("%s line 1: the #! line names no interpreter", argv[0])
		}
		cmd = append(interp, argv...)
	}
	return &batchScript{path: argv[at], cmd: cmd, opts: opts}, nil
}

// fromScript are the request's options that came from the script or the
// environment (the command line's are the user's own).
func (r *scriptReq) fromScript() map[string]slurm.ScriptOption {
	out := map[string]slurm.ScriptOption{}
	for k, v := range r.vals {
		if v.Line >= 0 {
			out[k] = v
		}
	}
	return out
}

// scriptReq is what a batch script asks, the last of each option winning
// as in sbatch, before the command line's flags go over it.
type scriptReq struct {
	path string                        // the script's, for the messages
	vals map[string]slurm.ScriptOption // the request's options, by long name
	site []Directive                   // options passed on as they are
	// envTaken are the SBATCH_* variables taken into the request.
	envTaken map[string]bool
}

// where says where an option was given: the command line (line -1), the
// environment (line 0), or the script's line.
func (r *scriptReq) where(o slurm.ScriptOption) string {
	switch {
	case o.Line < 0:
		return o.Written
	case o.Line == 0:
		return o.Written + " (environment)"
	}
	return fmt.Sprintf("%s line %d: %s", r.path, o.Line, o.Written)
}

// from is where the request's option name was given.
func (r *scriptReq) from(name string) string { return r.where(r.vals[name]) }

// scriptRefused are the options a batch script may not carry into an isched
// run, and why (those isched sets itself, or that break the run).
var scriptRefused = map[string]string{
	"chdir":    "isched runs the job in the directory isched submit runs in",
	"clusters": "use isched submit --cluster", "wait": "isched submits and returns", "wrap": "the script is the command", "test-only": "use isched submit --dry-run",
	"comment": "the comment carries isched's plan", "no-requeue": "moves and continuations are requeues",
	"uid": "use --as-user", "gid": "use --as-user", "priority": "a privileged option", "get-user-env": "use --export=NONE",
	"export-file": "use --export", "time-min": "isched sets and extends the time limit", "help": "not an option of a job", "usage": "not an option of a job",
	"version": "not an option of a job", "batch": "not an option of a job step", "gpus-per-task": "use --gpus-per-node or --gres",
	"gpus-per-socket": "use --gpus-per-node or --gres",
}

// scriptReplaced are the options isched does itself, in its own way: taken
// with a note.
var scriptReplaced = map[string]string{
	"requeue":    "isched always requeues its jobs",
	"open-mode":  "isched appends the output across attempts",
	"ignore-pbs": "isched reads no #PBS lines",
}

// scriptRequestOptions are the options that become the request (not passed
// on as site lines).
var scriptRequestOptions = map[string]bool{
	"partition": true, "gres": true, "gpus": true, "gpus-per-node": true, "time": true, "mem": true, "mem-per-cpu": true,
	"mem-per-gpu": true, "cpus-per-task": true, "cpus-per-gpu": true, "nodes": true, "ntasks": true, "job-name": true,
	"output": true, "error": true, "parsable": true, "account": true, "qos": true, "mail-type": true, "mail-user": true, "constraint": true, "export": true,
	"signal": true, "nice": true, "array": true,
}

// readScriptReq sorts a script's options (then the SBATCH_* variables of
// environ, over them) into the request, the site lines, the notes; a
// refused option is the error, with its line.
func readScriptReq(path string, opts []slurm.ScriptOption) (*scriptReq, []string, error) {
	r := &scriptReq{path: path, vals: map[string]slurm.ScriptOption{}, envTaken: map[string]bool{}}
	var notes []string
	for _, o := range opts {
		where := r.where(o)
		if why, ok := scriptRefused[o.Name]; ok {
			return nil, nil, usageErr("%s: --%s is not taken (%s)", where, o.Name, why)
		}
		if why, ok := scriptReplaced[o.Name]; ok {
			notes = append(notes, where+": "+why)
			continue
		}
		if scriptRequestOptions[o.Name] {
			if o.Line == 0 {
				r.envTaken[o.Written[:strings.IndexByte(o.Written, '=')]] = true
			}
			r.vals[o.Name] = o
			continue
		}
		d, err := checkPassed(o)
		if err != nil {
			return nil, nil, usageErr("%s: %v", where, err)
		}
		r.site = append(r.site, d)
	}
	return r, notes, nil
}

// envOptions are the SBATCH_* variables that stand for a request option,
// as options of line 0 (sbatch: they beat the script's lines).
func envOptions(environ []string) []slurm.ScriptOption {
	var out []slurm.ScriptOption
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		opt, ok := envVarOption(k)
		if ok && scriptRequestOptions[opt] && opt != "signal" && opt != "export" {
			out = append(out, slurm.ScriptOption{Name: opt, Value: v, HasValue: true, Written: kv})
		}
	}
	return out
}

// checkPassed checks an option passed on to sbatch as it is: a value of
// safe characters, as --sbatch-arg's.
func checkPassed(o slurm.ScriptOption) (Directive, error) {
	if o.HasValue && !safeSbatchValue(o.Value) {
		return Directive{}, fmt.Errorf("the value of --%s may hold only letters, digits and ._,:=/@%%+*&|[]()!~^- (no spaces, quotes, '#' or '$')", o.Name)
	}
	return Directive{Name: o.Name, Value: o.Value, HasValue: o.HasValue}, nil
}

var (
	gpuCountRE   = regexp.MustCompile(`^(?:([A-Za-z0-9_.-]+):)?([1-9][0-9]{0,3})$`)
	memSizeRE    = regexp.MustCompile(`^([1-9][0-9]{0,9})([KMGT]?)$`)
	signalNameRE = regexp.MustCompile(`^[A-Z][A-Z0-9]{1,7}$`)
)

// flagsSet are the isched flags given on the command line, each by its
// isched name (an sbatch spelling counts as its flag).
func flagsSet(fs *pflag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { set[f.Name] = true }) // sbatchAliases: the names are isched's
	return set
}

// apply takes the script's request into o where the command line did not
// set the same.
func (r *scriptReq) apply(o *submitOpts, set map[string]bool) error {
	str := func(opt, flagName string, dst *string) {
		if v, ok := r.vals[opt]; ok && !set[flagName] {
			*dst = v.Value
		}
	}
	str("job-name", "job-name", &o.name)
	str("output", "output", &o.output)
	str("error", "error", &o.errPath)
	if _, ok := r.vals["parsable"]; ok && !set["parsable"] {
		o.parsable = true
	}
	str("time", "time", &o.req.time)
	str("account", "account", &o.site.account)
	str("qos", "qos", &o.site.qos)
	str("mail-type", "mail-type", &o.site.mailType)
	str("mail-user", "mail-user", &o.site.mailUser)
	str("constraint", "constraint", &o.site.constraint)
	str("export", "export", &o.export)
	str("nodes", "nodes", &o.site.nodes)
	str("array", "array", &o.array)
	if err := r.partitions(o, set); err != nil {
		return err
	}
	if err := r.counts(o, set); err != nil {
		return err
	}
	gpus, err := r.gpus(o, set)
	if err != nil {
		return err
	}
	if err := r.memory(o, set, gpus); err != nil {
		return err
	}
	if err := r.signal(o); err != nil {
		return err
	}
	o.site.scriptDirs = append(o.site.scriptDirs, r.site...)
	return r.nice(o)
}

// partitions: the first listed is the ideal, the others its fallbacks.
func (r *scriptReq) partitions(o *submitOpts, set map[string]bool) error {
	v, ok := r.vals["partition"]
	if !ok || set["partition-ideal"] {
		return nil
	}
	parts := strings.Split(v.Value, ",")
	o.req.ideal = parts[0]
	if len(parts) > 1 && !set["fallback"] {
		o.req.fallback = strings.Join(parts[1:], ",")
	}
	return nil
}

// counts: --ntasks, --cpus-per-task.
func (r *scriptReq) counts(o *submitOpts, set map[string]bool) error {
	for _, c := range []struct {
		opt, flag string
		dst       *int
	}{{"ntasks", "ntasks", &o.site.ntasks}, {"cpus-per-task", "cpus", &o.req.cpus}} {
		v, ok := r.vals[c.opt]
		if !ok || set[c.flag] {
			continue
		}
		n, err := strconv.Atoi(v.Value)
		if err != nil || n < 1 {
			return usageErr("%s: --%s %q: want a count", r.from(c.opt), c.opt, v.Value)
		}
		*c.dst = n
	}
	return nil
}

// gpus: --gres=gpu[:type]:N, --gpus-per-node=[type:]N, or --gpus=[type:]N
// on one node, as the ideal's GRES; it returns the GPUs per node.
func (r *scriptReq) gpus(o *submitOpts, set map[string]bool) (int, error) {
	if set["gres"] {
		return gresGPUs(o.req.gres), nil
	}
	if v, ok := r.last("gres", "gpus-per-node", "gpus"); ok {
		opt := v.Name
		val := v.Value
		if opt == "gres" {
			rest, isGPU := strings.CutPrefix(val, "gpu")
			if !isGPU || rest != "" && rest[0] != ':' || strings.Contains(val, ",") {
				return 0, usageErr("%s: --gres %q: isched requests GPUs only (gpu[:type]:N)", r.from(opt), val)
			}
			val = strings.TrimPrefix(rest, ":")
			if val == "" {
				val = "1"
			}
		}
		if opt == "gpus" && o.site.nodes != "" && o.site.nodes != "1" {
			return 0, usageErr("%s: --gpus counts the GPUs of all %s nodes: say --gpus-per-node", r.from(opt), o.site.nodes)
		}
		m := gpuCountRE.FindStringSubmatch(val)
		if m == nil {
			return 0, usageErr("%s: --%s %q: want [type:]N GPUs", r.from(opt), opt, v.Value)
		}
		o.req.gres = "gpu:" + m[2]
		if m[1] != "" {
			o.req.gres = "gpu:" + m[1] + ":" + m[2]
		}
		n, _ := strconv.Atoi(m[2])
		return n, nil
	}
	return 0, nil
}

// last is the one of the options given last, sbatch's rule: the command
// line over the environment over the script's lines, a later line over an
// earlier one.
func (r *scriptReq) last(names ...string) (slurm.ScriptOption, bool) {
	rank := func(o slurm.ScriptOption) int {
		switch {
		case o.Line < 0:
			return math.MaxInt
		case o.Line == 0:
			return math.MaxInt - 1
		}
		return o.Line
	}
	var best slurm.ScriptOption
	found := false
	for _, n := range names {
		if v, ok := r.vals[n]; ok && (!found || rank(v) > rank(best)) {
			best, found = v, true
		}
	}
	return best, found
}

// gresGPUs is the GPUs a --gres asks per node, as slurm.GPUs counts them
// (0: none, or not a GRES Slurm reads).
func gresGPUs(g string) int {
	byType, _ := slurm.GPUs(g)
	n := 0
	for _, c := range byType {
		n += c
	}
	return n
}

// memory: --mem per node, or --mem-per-gpu × the GPUs, or --mem-per-cpu
// × the CPUs of a node's tasks; --cpus-per-gpu sets the CPUs.
func (r *scriptReq) memory(o *submitOpts, set map[string]bool, gpus int) error {
	if v, ok := r.last("cpus-per-task", "cpus-per-gpu"); ok && v.Name == "cpus-per-gpu" && !set["cpus"] {
		n, err := strconv.Atoi(v.Value)
		if err != nil || n < 1 || gpus == 0 {
			return usageErr("%s: --cpus-per-gpu %q: want a count, and GPUs asked", r.from("cpus-per-gpu"), v.Value)
		}
		o.req.cpus = n * gpus
	}
	if set["mem"] {
		return nil
	}
	per := map[string]int{"mem": 1, "mem-per-gpu": gpus, "mem-per-cpu": max(o.req.cpus, 1) * max(o.site.ntasks, 1)}
	if v, ok := r.last("mem", "mem-per-gpu", "mem-per-cpu"); ok {
		opt := v.Name
		m := memSizeRE.FindStringSubmatch(v.Value)
		if m == nil || per[opt] == 0 {
			return usageErr("%s: --%s %q: want a size such as 40G (and, per GPU, GPUs asked)", r.from(opt), opt, v.Value)
		}
		if opt == "mem" {
			o.req.mem = v.Value
		} else {
			o.req.mem = strconv.FormatInt(memMiB(v.Value)*int64(per[opt]), 10) + "M"
		}
		return nil
	}
	return nil
}

// signal: the script's --signal=[B:]SIG[@lead] says how its loop takes a
// checkpoint request; isched sends that signal, timed from the run's
// measured checkpoint.
func (r *scriptReq) signal(o *submitOpts) error {
	v, ok := r.vals["signal"]
	if !ok {
		return nil
	}
	sig, _, _ := strings.Cut(v.Value, "@")
	if i := strings.IndexByte(sig, ':'); i >= 0 {
		sig = sig[i+1:]
	}
	sig = strings.TrimPrefix(strings.ToUpper(sig), "SIG")
	if _, err := child.ParseSignalMap("USR1=" + sig); err != nil || !signalNameRE.MatchString(sig) {
		return usageErr("%s: --signal %q: want [B:]SIGNAL[@seconds] with a signal the wrapper can deliver", r.from("signal"), v.Value)
	}
	o.wrapperArgs = append(o.wrapperArgs, "--checkpoint-signal", sig)
	return nil
}

// nice: 0 or more is any user's, passed on; a negative one is privileged.
func (r *scriptReq) nice(o *submitOpts) error {
	v, ok := r.vals["nice"]
	if !ok {
		return nil
	}
	if n, err := strconv.Atoi(v.Value); v.HasValue && (err != nil || n < 0) {
		return usageErr("%s: --nice %q: only a privileged user may lower a nice value below 0", r.from("nice"), v.Value)
	}
	o.site.scriptDirs = append(o.site.scriptDirs, Directive{Name: "nice", Value: v.Value, HasValue: v.HasValue})
	return nil
}

// takeRequest takes the request's sbatch options: a batch script's lines
// (when the command is one) and the SBATCH_* variables over them, then the
// command line's --gpus, --mem-per-gpu and the like; set are the flags
// the command line gave, which go over all of it. It says what it took
// from a script.
func (a *App) takeRequest(o *submitOpts, set map[string]bool) error {
	cwd, err := a.Getwd()
	if err != nil {
		return err
	}
	bs, err := findBatchScript(o.argv, cwd, readFile)
	if err != nil {
		return err
	}
	flagOpts, err := o.perGPUOptions()
	if err != nil {
		return err
	}
	opts := flagOpts
	if bs != nil {
		opts = slices.Concat(bs.opts, envOptions(a.Environ()), flagOpts)
	}
	if len(opts) == 0 {
		return nil
	}
	path := "the command line"
	if bs != nil {
		path = bs.path
	}
	r, notes, err := readScriptReq(path, opts)
	if err != nil {
		return err
	}
	for name := range o.perGPU {
		delete(set, name) // taken as options, beside the script's
	}
	if err := r.apply(o, set); err != nil || bs == nil {
		return err
	}
	bs.envTaken = r.envTaken
	o.batch, o.argv = bs, bs.cmd
	if o.name == "" { // the script's name, as sbatch names the job
		o.name = jobName([]string{strings.TrimSuffix(filepath.Base(bs.path), filepath.Ext(bs.path))})
	}
	for _, n := range notes {
		fmt.Fprintf(a.stderr, "isched submit: %s\n", n)
	}
	took := slices.SortedFunc(maps.Values(r.fromScript()), func(x, y slurm.ScriptOption) int {
		return cmp.Or(cmp.Compare(x.Line, y.Line), cmp.Compare(x.Name, y.Name))
	})
	var what []string
	for _, o := range took {
		if o.Line == 0 {
			what = append(what, o.Written)
		} else {
			what = append(what, fmt.Sprintf("line %d %s", o.Line, o.Written))
		}
	}
	fmt.Fprintf(a.stderr, "isched submit: %s is the request: %d options taken (%s), %d passed on to sbatch; flags given here go over them\n",
		bs.path, len(took), strings.Join(what, ", "), len(r.site))
	return nil
}
