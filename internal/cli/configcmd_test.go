package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/isched/isched/internal/clientconfig"
)

// TestConfigCommand: isched config shows each setting's value and source,
// with the environment over the user's file over the site's over the
// built-in default, and the files' values reach what the commands read.
func TestConfigCommand(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site.conf")
	user := filepath.Join(dir, "user.conf")
	if err := os.WriteFile(site, []byte("cluster = frontera\nrelay_addr = relay.example.org:6395\naccount = physics\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(user, []byte("account = bio_lab\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.Load(site, user)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ISCHED_REDIS_ADDR": "10.1.2.3:6390"}
	getenv := func(k string) string { return env[k] }
	app := &App{Getenv: cfg.Getenv(getenv), Env: getenv, Config: cfg}
	var out, errb bytes.Buffer
	if code := app.Run(context.Background(), []string{"config", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rows []configRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]configRow{}
	for _, r := range rows {
		got[r.Key] = r
	}
	for key, want := range map[string]configRow{
		"cluster":            {Value: "frontera", Origin: site + ":1"},
		"relay_addr":         {Value: "relay.example.org:6395", Origin: site + ":2"},
		"account":            {Value: "bio_lab", Origin: user + ":1"},
		"redis_addr":         {Value: "10.1.2.3:6390", Origin: "environment (ISCHED_REDIS_ADDR)"},
		"redis_user":         {Value: "viewer", Origin: "built-in"},
		"redis_password_dir": {Value: "", Origin: "unset"}, // no lab path built in
		"coordinator_uid":    {Value: "", Origin: "unset"},
	} {
		if g := got[key]; g.Value != want.Value || g.Origin != want.Origin {
			t.Errorf("%s: %q from %q, want %q from %q", key, g.Value, g.Origin, want.Value, want.Origin)
		}
	}
	if len(rows) != len(clientconfig.Keys) {
		t.Errorf("%d rows, want one per key (%d)", len(rows), len(clientconfig.Keys))
	}
	out.Reset()
	if code := app.Run(context.Background(), []string{"config"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "frontera") ||
		!strings.Contains(out.String(), site+":1") || !strings.Contains(out.String(), "configuration files read: ["+site+" "+user+"]") {
		t.Errorf("exit %d, text:\n%s", code, out.String())
	}
	// what the commands read: the cluster of the files, the relay passed on to jobs
	if app.cluster() != "frontera" {
		t.Errorf("cluster %q", app.cluster())
	}
}

// TestBadConfigStopsCommands: a bad file stops every command but help and
// version, naming the file and line.
func TestBadConfigStopsCommands(t *testing.T) {
	p := filepath.Join(t.TempDir(), "isched.conf")
	if err := os.WriteFile(p, []byte("clustr = x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.Load(p)
	if err == nil {
		t.Fatal("no error")
	}
	app := &App{Getenv: cfg.Getenv(func(string) string { return "" }), Config: cfg, ConfigErr: err}
	for _, tt := range []struct {
		args []string
		code int
	}{{[]string{"status", "1"}, ExitUsage}, {[]string{"config"}, ExitUsage}, {[]string{"--help"}, ExitOK}, {[]string{"version"}, ExitOK}} {
		var out, errb bytes.Buffer
		code := app.Run(context.Background(), tt.args, &out, &errb)
		if code != tt.code || code != ExitOK && !strings.Contains(errb.String(), p+`:1: unknown key "clustr"`) {
			t.Errorf("%v: exit %d, stderr %q", tt.args, code, errb.String())
		}
	}
}

// namedCluster is a Slurm whose ClusterName is name (or fails with err).
type namedCluster struct {
	fakeSlurm
	name string
	err  error
}

func (n *namedCluster) ClusterName(context.Context) (string, error) { return n.name, n.err }

// TestClusterWithoutConfig: with no cluster set anywhere the CLI takes
// Slurm's ClusterName, as isched-agent does, and says so in isched
// config; with neither, a command that needs one stops and says what to
// set. Nothing falls back to the dev lab's name.
func TestClusterWithoutConfig(t *testing.T) {
	h := newHarness(t)
	delete(h.env, "ISCHED_CLUSTER")
	app := h.app()
	app.Slurm = &namedCluster{name: "frontera"}
	var out, errb bytes.Buffer
	if code := app.Run(context.Background(), []string{"config", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rows []configRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Key == "cluster" && (r.Value != "frontera" || r.Origin != "Slurm (scontrol show config: ClusterName)") {
			t.Errorf("cluster row %+v, want Slurm's frontera", r)
		}
	}
	if c := app.cluster(); c != "frontera" {
		t.Errorf("cluster %q, want Slurm's", c)
	}
	// a cluster but no Redis: the key to set, not a lab address
	delete(h.env, "ISCHED_REDIS_ADDR")
	app = h.app()
	app.Slurm = &namedCluster{name: "frontera"}
	out.Reset()
	errb.Reset()
	if code := app.Run(context.Background(), []string{"status", "7"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "no Redis address: set redis_addr in /etc/isched/isched.conf or ISCHED_REDIS_ADDR") {
		t.Errorf("status without Redis: exit %d, stderr %q", code, errb.String())
	}
	for _, args := range [][]string{{"status", "7"}, {"submit", "-p", "cpu", "-t", "10", "--", "python3", "train.py"}} {
		app = h.app()
		app.Slurm = &namedCluster{err: errors.New("scontrol: command not found")}
		out.Reset()
		errb.Reset()
		code := app.Run(context.Background(), args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), "no cluster name: set cluster in /etc/isched/isched.conf or ISCHED_CLUSTER") ||
			!strings.Contains(errb.String(), "scontrol: command not found") {
			t.Errorf("%v without a cluster: exit %d, stderr %q", args, code, errb.String())
		}
		if strings.Contains(out.String()+errb.String(), "lab") {
			t.Errorf("%v: the lab's name appears: %s%s", args, out.String(), errb.String())
		}
	}
}
