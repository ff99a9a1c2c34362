//go:build !(cgo && libmunge)

package auth

// DefaultMunger is the Munger a service uses: the munge and unmunge
// commands in this build (built without the libmunge tag or without cgo),
// on munged's default socket unless socket is set.
func DefaultMunger(socket string) Munger { return ExecMunger{Socket: socket} }

// MungerKind names DefaultMunger's implementation (logged at start).
const MungerKind = "munge commands"
