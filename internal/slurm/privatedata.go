package slurm

import (
	"context"
	"strings"
)

// PrivateData is Slurm's PrivateData setting (`scontrol show config`):
// what slurmctld hides from users other than its owner, root, SlurmUser and
// operators, lower-case ("jobs", "usage", ...); empty for "none".
func (c *Client) PrivateData(ctx context.Context) ([]string, error) {
	out, err := c.run(ctx, or(c.Scontrol, "scontrol"), []string{"show", "config"}, nil)
	if err != nil {
		return nil, err
	}
	return ParsePrivateData(out), nil
}

// ParsePrivateData is the PrivateData items of `scontrol show config`
// output ("PrivateData             = accounts,jobs"): none, or an absent
// line, is empty.
func ParsePrivateData(conf []byte) []string {
	var out []string
	for _, f := range strings.Split(ConfigValue(conf, "PrivateData"), ",") {
		f = strings.ToLower(strings.TrimSpace(f))
		if f != "" && f != "none" && f != "(null)" {
			out = append(out, f)
		}
	}
	return out
}
