package report

import "testing"

// TestBinds: an association's limit binds its user's jobs in its account
// (a job naming no account runs in the user's default); a QOS's binds its
// QOS's jobs in any account.
func TestBinds(t *testing.T) {
	t.Parallel()
	quota := UserLimit{User: "alice", Account: "physics", Resource: LimitGPU, Max: 1, Reason: "AssocGrpGRES"}
	def := quota
	def.Account, def.DefaultAccount = "research", true
	part := UserLimit{User: "alice", Account: "research", DefaultAccount: true, Partition: "gpu", Resource: LimitGPU, Max: 2}
	capped := UserLimit{User: "alice", Account: "physics", QOS: "capped", Resource: LimitGPU, Max: 1}
	normal := UserLimit{User: "alice", Account: "physics", QOS: "normal", Default: true, Resource: LimitGPU, Max: 4}
	old := UserLimit{User: "alice", Resource: LimitGPU, Max: 1} // no account: an older agent's
	for _, c := range []struct {
		name               string
		l                  UserLimit
		qos, account, part string
		want               bool
	}{
		{"its account", quota, "", "physics", "gpu", true},
		{"another account", quota, "", "research", "gpu", false},
		{"no account named, not the default", quota, "", "", "gpu", false},
		{"no account named, the default", def, "", "", "gpu", true},
		{"the default, another named", def, "", "physics", "gpu", false},
		{"its partition", part, "", "", "gpu", true},
		{"another partition", part, "", "", "cpu", false},
		{"a QOS in any account", capped, "capped", "research", "cpu", true},
		{"another QOS", capped, "normal", "physics", "cpu", false},
		{"the default QOS", normal, "", "chemistry", "cpu", true},
		{"no account on the limit", old, "", "physics", "gpu", true},
	} {
		if got := c.l.Binds(c.qos, c.account, c.part); got != c.want {
			t.Errorf("%s: Binds(%q, %q, %q) = %v, want %v", c.name, c.qos, c.account, c.part, got, c.want)
		}
	}
}
