package cli

import (
	"strings"
	"testing"
)

// TestDryRunMasksSecrets: the dry run showed the script with every
// variable of the environment, API keys and tokens in clear; it shows
// them masked now (the job itself still gets them).
func TestDryRunMasksSecrets(t *testing.T) {
	h := newHarness(t)
	h.labState()
	h.env["WANDB_API_KEY"] = "wk-12345"
	h.env["HF_TOKEN"] = "hf_abcdef"
	h.env["MY_db_password"] = "hunter2"
	h.env["SBATCH_ACCOUNT"] = "phys"
	h.env["PROJECT"] = "visible"
	code, out, errOut := h.run("submit", "--dry-run", "--partition-ideal", "cpu", "--time", "30", "--wrapper", "/opt/isched/bin/isched-wrapper",
		"--", "/usr/bin/python3", "train.py")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, secret := range []string{"wk-12345", "hf_abcdef", "hunter2"} {
		if strings.Contains(out, secret) || strings.Contains(errOut, secret) {
			t.Errorf("the dry run printed the secret %q:\n%s\n%s", secret, out, errOut)
		}
	}
	for _, want := range []string{"export WANDB_API_KEY='********'\n", "export HF_TOKEN='********'\n", "export MY_db_password='********'\n", "export PROJECT=visible\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("script without %q:\n%s", want, out)
		}
	}
}

func TestMaskScript(t *testing.T) {
	t.Parallel()
	in := "#!/bin/bash\nexport A=1\nexport GITHUB_TOKEN='x y'\nexport SECRETLESS=2\n# export KEY=3\nexport AWS_SECRET_ACCESS_KEY=z"
	want := "#!/bin/bash\nexport A=1\nexport GITHUB_TOKEN='********'\nexport SECRETLESS='********'\n# export KEY=3\nexport AWS_SECRET_ACCESS_KEY='********'"
	if got := string(maskScript([]byte(in))); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := maskEnv([]string{"SBATCH_ACCOUNT=phys", "SBATCH_X_KEY=k", "ISCHED_REDIS_PASSWORD_FILE=/etc/p"}); got[0] != "SBATCH_ACCOUNT=phys" || got[1] != "SBATCH_X_KEY='********'" || got[2] != "ISCHED_REDIS_PASSWORD_FILE=/etc/p" {
		t.Errorf("maskEnv: %q", got)
	}
}
