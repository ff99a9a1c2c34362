package policy

import (
	"testing"
	"time"
)

// TestDecideTrimLimit is rule 6. The base job has run 1 h of a 24 h
// limit and has 10 000 steps left at 120 ms at worst (20 min), so it
// needs 1 h + 20 min × 1.1 + checkpoint 20 s + margin 1 m = 1h23m20s,
// 1h24m in whole minutes: 22h36m of its limit are a hole backfill could
// use.
func TestDecideTrimLimit(t *testing.T) {
	t.Parallel()
	on := func(c *Config) { c.TrimLimits = true }
	tests := []struct {
		name string
		cfg  func(*Config)
		job  func(*Job)
		check
	}{
		{name: "off by default", check: check{want: Decision{Kind: None}, reason: []string{"trim limit: off (trim_time_limits is false)"}}},
		{name: "far before the limit: lowered to the end at worst", cfg: on,
			check: check{want: Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: time.Hour + 24*time.Minute}, reason: []string{
				"predicted end 14:16:40 (at worst 14:20:00; 10000 of 100000 iterations left at 100.0 ms each) is far before the time limit Mar 2 13:00:00",
				"lowering the limit from 24h to 1h24m frees 22h36m for backfill (a miss is continued from the checkpoint at step 35000)"}}},
		{name: "the calibrated band is later: it counts", cfg: on, job: func(j *Job) { j.ETAHigh = now.Add(2 * time.Hour) },
			// 1 h + 2 h × 1.1 + 20 s + 1 m = 3h13m20s
			check: check{want: Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: 3*time.Hour + 14*time.Minute}, reason: []string{"at worst 16:00:00"}}},
		{name: "the calibrated band is earlier: the estimate's end counts", cfg: on, job: func(j *Job) { j.ETAHigh = now.Add(time.Minute) },
			check: check{want: Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: time.Hour + 24*time.Minute}}},
		{name: "exactly trim_min to free: trimmed", cfg: func(c *Config) { on(c); c.TrimMin = 22*time.Hour + 36*time.Minute },
			check: check{want: Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: time.Hour + 24*time.Minute}}},
		{name: "a minute less than trim_min: left", cfg: func(c *Config) { on(c); c.TrimMin = 22*time.Hour + 37*time.Minute },
			check: check{want: Decision{Kind: None}, reason: []string{"the run needs 1h24m at worst of its 24h limit: less than 22h37m or a fifth to free"}}},
		{name: "more than trim_min but not a fifth: left", cfg: on, job: func(j *Job) { j.TimeLimit = time.Hour + 40*time.Minute },
			check: check{want: Decision{Kind: None}, reason: []string{"needs 1h24m at worst of its 1h40m limit"}}},
		{name: "a fifth exactly: trimmed", cfg: on, job: func(j *Job) { j.TimeLimit = time.Hour + 45*time.Minute },
			check: check{want: Decision{Kind: Shorten, Rule: RuleTrimLimit, TimeLimit: time.Hour + 24*time.Minute}}},
		{name: "provisional estimate", cfg: on, job: func(j *Job) { j.Iter.Provisional = true },
			check: check{want: Decision{Kind: None}, reason: []string{"the iteration estimate is still provisional"}}},
		{name: "no checkpoint yet", cfg: on, job: func(j *Job) { j.LastCkptAt, j.LastCkptStep = time.Time{}, 0 },
			check: check{want: Decision{Kind: None}, reason: []string{"no checkpoint confirmed yet"}}},
		{name: "continuations off: a miss would end the run", cfg: func(c *Config) { on(c); c.NoContinuations = true },
			check: check{want: Decision{Kind: None}, reason: []string{"a miss could not be continued: continuations are off"}}},
		{name: "right after an action", cfg: on, job: func(j *Job) { j.LastMoveAt = now.Add(-5 * time.Minute) },
			check: check{want: Decision{Kind: None}, reason: []string{"the last action was 5m ago (hysteresis 10m)"}}},
		{name: "end unknown", cfg: on, job: func(j *Job) { j.Total, j.Plan.Total = 0, 0 },
			check: check{want: Decision{Kind: None}, reason: []string{"trim limit: end unknown (total iterations unknown)"}}},
		{name: "limit unknown", cfg: on, job: func(j *Job) { j.TimeLimit = 0 },
			check: check{want: Decision{Kind: None}, reason: []string{"trim limit: time limit unknown"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := labCfg()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			j := onGPU()
			j.StartedAt, j.TimeLimit, j.Step = now.Add(-time.Hour), 24*time.Hour, 90000
			if tc.job != nil {
				tc.job(&j)
			}
			tc.verify(t, Decide(cfg, j, lab(), now))
		})
	}
}

// TestTrimmedLimitNeverBelowTheNeed: the trimmed limit always covers
// what ran, the rest at worst, a checkpoint and the margin, in whole
// minutes: a prediction that holds never meets the new limit.
func TestTrimmedLimitNeverBelowTheNeed(t *testing.T) {
	t.Parallel()
	for _, elapsed := range []time.Duration{0, 59 * time.Second, time.Hour + 30*time.Second} {
		for _, rest := range []time.Duration{0, time.Second, 17 * time.Minute, 9 * time.Hour} {
			tl := trimmedLimit(elapsed, rest, 20*time.Second, time.Minute)
			need := elapsed + rest + 20*time.Second + time.Minute
			if tl < need || tl%time.Minute != 0 || tl-need >= rest/10+time.Minute {
				t.Errorf("elapsed %s rest %s: limit %s for a need of %s", elapsed, rest, tl, need)
			}
		}
	}
}
