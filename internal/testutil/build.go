package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// RepoRoot is the module's root directory.
func RepoRoot() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(f), "..", ".."))
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]error{}
)

// Binary builds the command in pkg (relative to the repository, e.g.
// "./wrapper") once per test process and returns the path of the binary,
// named name, in a directory every test user can read.
func Binary(t testing.TB, name, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "isched-test-bin")
		if err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o755)
		buildDir = dir
	}
	path := filepath.Join(buildDir, name)
	err, done := built[path]
	if !done {
		cmd := exec.Command("go", "build", "-o", path, pkg)
		cmd.Dir = RepoRoot()
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("go build %s: %v: %s", pkg, e, out)
		}
		built[path] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// RemoveBinaries deletes what Binary built (call it from TestMain).
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// WorkDir is a temporary directory any user may write (jobs may run as
// alice or bob), removed when the test ends.
func WorkDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
