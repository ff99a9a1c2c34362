package cli

import (
	"flag"
	"strings"
)

// splitAttached rewrites sbatch's attached short options ("-pgpu",
// "-t2:00:00", "-c8") as the flag package wants them ("-p", "gpu"): an
// argument of one dash whose whole name is no flag, but whose first letter
// is a one-letter flag that takes a value, is split after that letter. It
// stops at "--" and at the first argument that is not a flag, and skips the
// value of a flag given apart ("-J", "-x1"), so a command's own arguments
// and flag values are never touched. sbatch (getopt) reads the same
// spellings the same way.
func splitAttached(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		name, _, hasValue := strings.Cut(name, "=")
		if f := fs.Lookup(name); f != nil {
			out = append(out, a)
			if !hasValue && !isBool(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			continue
		}
		if a[1] != '-' && len(a) > 2 {
			if f := fs.Lookup(a[1:2]); f != nil && !isBool(f) {
				out = append(out, a[:2], a[2:])
				continue
			}
		}
		out = append(out, a) // not a flag: the parser says so
	}
	return out
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
