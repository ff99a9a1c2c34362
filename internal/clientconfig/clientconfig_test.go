package clientconfig

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence: the user's file over the site's, the environment over
// both; a missing file is no error.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	site := write(t, dir, "site.conf", "# the site's\ncluster = frontera\nrelay_addr = relay.example.org:6395\n\nsite = /etc/isched/site.json\naccount = physics\n")
	user := write(t, dir, "user.conf", "cluster=ls6\n  # indented comment\naccount = bio_lab\n")
	c, err := Load(site, filepath.Join(dir, "missing.conf"), user)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Files, []string{site, user}) {
		t.Errorf("files %q", c.Files)
	}
	env := map[string]string{"ISCHED_RELAY_ADDR": "10.0.0.5:6395"}
	get := c.Getenv(func(k string) string { return env[k] })
	for k, want := range map[string]string{
		"ISCHED_CLUSTER":    "ls6",           // user over site
		"ISCHED_RELAY_ADDR": "10.0.0.5:6395", // environment over both
		"ISCHED_SITE":       "/etc/isched/site.json",
		"SBATCH_ACCOUNT":    "bio_lab",
		"ISCHED_REDIS_ADDR": "",
		"HOME":              "",
	} {
		if got := get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if v, _ := c.Get("ISCHED_CLUSTER"); v.Origin != user+":1" {
		t.Errorf("cluster's origin %q, want %s:1", v.Origin, user)
	}
	if v, _ := c.Get("ISCHED_SITE"); v.Origin != site+":5" {
		t.Errorf("site's origin %q, want %s:5", v.Origin, site)
	}
	environ := c.Environ([]string{"PATH=/usr/bin", "ISCHED_CLUSTER=mine"})
	if !slices.Contains(environ, "SBATCH_ACCOUNT=bio_lab") || slices.Contains(environ, "ISCHED_CLUSTER=ls6") || !slices.Contains(environ, "ISCHED_CLUSTER=mine") {
		t.Errorf("environ %q", environ)
	}
}

// TestBadFiles: each mistake names the file, the line and the key.
func TestBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct{ text, want string }{
		{"cluster = a\nclustr = b\n", `:2: unknown key "clustr"`},
		{"cluster = a\n\ncluster = b\n", ":3: cluster given again (first on line 1)"},
		{"relay_addr\n", `:1: "relay_addr": want key = value`},
		{"relay_uid = nobody\n", `:1: relay_uid = "nobody": want a numeric uid`},
		{"site = etc/site.json\n", `:1: site = "etc/site.json": want an absolute path`},
		{"cluster = my cluster\n", `:1: cluster = "my cluster": want 1-64`},
		{"redis_addr = \n", ":1: redis_addr: empty"},
		{"account = a\x01b\n", ":1: account: empty, or a control character"},
		{strings.Repeat("# padding\n", 7000), "larger than"},
	} {
		p := write(t, dir, "bad.conf", tt.text)
		_, err := Load(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error naming %s and %q", tt.text, err, p, tt.want)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrConfig) {
		t.Errorf("a directory as a file: %v", err)
	}
}

func TestUserPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ xdg, home, want string }{
		{"/x/cfg", "/home/a", "/x/cfg/isched/isched.conf"},
		{"", "/home/a", "/home/a/.config/isched/isched.conf"},
		{"relative", "/home/a", "/home/a/.config/isched/isched.conf"},
		{"", "", ""},
	} {
		env := map[string]string{"XDG_CONFIG_HOME": tt.xdg, "HOME": tt.home}
		if got := UserPath(func(k string) string { return env[k] }); got != tt.want {
			t.Errorf("XDG %q HOME %q: %q, want %q", tt.xdg, tt.home, got, tt.want)
		}
	}
}

// TestLoadSiteFromEnv: ISCHED_CONF names the site's file in place of
// /etc/isched/isched.conf (a module selecting one of several clusters, the
// dev cluster's lab); the user's file still overrides it. A named file
// that is not there, or a relative name, is an error rather than a silent
// fall back to the built-in defaults.
func TestLoadSiteFromEnv(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "frontera.conf")
	if err := os.WriteFile(site, []byte("cluster = frontera\nrelay_addr = relay.frontera:6395\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".config", "isched"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "isched", "isched.conf"), []byte("relay_addr = mine:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, conf      string
		cluster, relay  string
		err             string
		unsetIsSitePath bool
	}{
		{name: "named file", conf: site, cluster: "frontera", relay: "mine:1"},
		{name: "missing file", conf: filepath.Join(dir, "nope.conf"), err: "ISCHED_CONF"},
		{name: "relative name", conf: "frontera.conf", err: "absolute"},
		{name: "unset", unsetIsSitePath: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"HOME": home, SiteEnv: tc.conf}
			getenv := func(k string) string { return env[k] }
			if tc.unsetIsSitePath {
				if got := SitePathFrom(getenv); got != SitePath {
					t.Fatalf("SitePathFrom = %q, want %q", got, SitePath)
				}
				return
			}
			c, err := LoadSite(getenv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cl, _ := c.Get("ISCHED_CLUSTER")
			rl, _ := c.Get("ISCHED_RELAY_ADDR")
			if cl.Value != tc.cluster || rl.Value != tc.relay {
				t.Errorf("cluster %q relay %q, want %q %q (the user's file over the site's)", cl.Value, rl.Value, tc.cluster, tc.relay)
			}
		})
	}
}

func TestParseClusters(t *testing.T) {
	good, err := ParseClusters("lab2=/etc/isched/clusters/lab2.conf, east = /srv/east.conf")
	if err != nil || len(good) != 2 || good[0] != (OtherCluster{"lab2", "/etc/isched/clusters/lab2.conf"}) || good[1] != (OtherCluster{"east", "/srv/east.conf"}) {
		t.Fatalf("ParseClusters: %+v, %v", good, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"lab2", "want NAME=CONF"},
		{"lab 2=/x.conf", "cluster name"},
		{"lab2=lab2.conf", "want an absolute path"},
		{"lab2=/a.conf,lab2=/b.conf", "named twice"},
		{"", "want NAME=CONF"},
	} {
		if _, err := ParseClusters(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseClusters(%q): %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
