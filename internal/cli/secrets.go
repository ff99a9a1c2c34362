package cli

import (
	"bytes"
	"strings"
)

// secretWords mark an environment variable whose value isched never
// prints (issue 43: the dry run printed WANDB_API_KEY and
// HF_TOKEN from the environment in clear). The job still gets the value:
// only what is shown is masked.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}

// masked is what a secret's value is shown as.
const masked = "'********'"

// secretName says whether an environment variable's name marks a secret.
func secretName(name string) bool {
	up := strings.ToUpper(name)
	for _, path := range []string{"_FILE", "_DIR", "_PATH"} {
		if strings.HasSuffix(up, path) {
			return false // where a secret is, not the secret (ISCHED_REDIS_PASSWORD_DIR)
		}
	}
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// maskScript is a batch script as shown to the user: the value of each
// `export NAME=value` line whose name marks a secret replaced by stars.
func maskScript(script []byte) []byte {
	lines := bytes.SplitAfter(script, []byte("\n"))
	for i, l := range lines {
		rest, ok := bytes.CutPrefix(l, []byte("export "))
		if !ok {
			continue
		}
		name, _, ok := bytes.Cut(rest, []byte("="))
		if !ok || !secretName(string(name)) {
			continue
		}
		nl := ""
		if bytes.HasSuffix(l, []byte("\n")) {
			nl = "\n"
		}
		lines[i] = []byte("export " + string(name) + "=" + masked + nl)
	}
	return bytes.Join(lines, nil)
}

// maskEnv is NAME=value pairs as shown: a secret's value is stars.
func maskEnv(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if secretName(name) {
			kv = name + "=" + masked
		}
		out[i] = kv
	}
	return out
}
