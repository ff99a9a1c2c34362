// Package version is the build's version, one for the four binaries.
package version

import "runtime"

// Version is stamped by the Makefile from git (`git describe --tags
// --always --dirty`) with -ldflags "-X
// github.com/isched/isched/internal/version.Version=…"; "dev" in a build
// that does not.
var Version = "dev"

// String is the line `-version` prints: "isched-agent 1.2.0 (go1.26.0)".
func String(program string) string {
	return program + " " + Version + " (" + runtime.Version() + ")"
}
