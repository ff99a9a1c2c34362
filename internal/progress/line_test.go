package progress

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func f64(v float64) *float64 { return &v }

// equalEvent compares everything a line carries (not At or Source).
func equalEvent(a, b Event) bool {
	if (a.Loss == nil) != (b.Loss == nil) || a.Loss != nil && *a.Loss != *b.Loss {
		return false
	}
	a.Loss, b.Loss = nil, nil
	a.At, b.At = time.Time{}, time.Time{}
	a.Source, b.Source = "", ""
	return a == b
}

func TestParseLine(t *testing.T) {
	t.Parallel()
	step := func(s int64) Event { return Event{Kind: KindStep, Step: s, Epoch: NoValue} }
	tests := []struct {
		line string
		want Event
	}{
		{"isched1 step=0", step(0)},
		{"isched1 step=12\n", step(12)},
		{"isched1 step=12\r\n", step(12)},
		{"isched1 step=450 epoch=3 samples=14400 loss=0.4123 t=1732242000.123456 total=1000 epochs=10 steps_per_epoch=100",
			Event{Kind: KindStep, Step: 450, Epoch: 3, Samples: 14400, Loss: f64(0.4123), LoopTime: 1732242000.123456,
				Total: 1000, Epochs: 10, StepsPerEpoch: 100}},
		{"isched1  total=1000\tstep=5 epoch=0", Event{Kind: KindStep, Step: 5, Epoch: 0, Total: 1000}},
		{"isched1 step=1 loss=nan", Event{Kind: KindStep, Step: 1, Epoch: NoValue, NonFinite: true}},
		{"isched1 step=1 loss=-inf", Event{Kind: KindStep, Step: 1, Epoch: NoValue, NonFinite: true}},
		{"isched1 step=1 loss=Infinity", Event{Kind: KindStep, Step: 1, Epoch: NoValue, NonFinite: true}},
		{"isched1 step=1 loss=1e-05", Event{Kind: KindStep, Step: 1, Epoch: NoValue, Loss: f64(1e-05)}},
		{"isched1 step=1 loss=-0.5", Event{Kind: KindStep, Step: 1, Epoch: NoValue, Loss: f64(-0.5)}},
		{"isched1 step=9223372036854775807", step(math.MaxInt64)},
		{"isched1 ckpt path=/scratch/run%201/ep%3D3/ckpt.pt step=1000 t=1732242000.5",
			Event{Kind: KindCkpt, Step: 1000, Epoch: NoValue, Path: "/scratch/run 1/ep=3/ckpt.pt", LoopTime: 1732242000.5}},
		{"isched1 ckpt path=rel/c%C3%A9.pt", Event{Kind: KindCkpt, Step: NoValue, Epoch: NoValue, Path: "rel/cé.pt"}},
		{"isched1 ckpt path=/a=b step=3 epoch=1", Event{Kind: KindCkpt, Step: 3, Epoch: 1, Path: "/a=b"}},
		{"isched1 resume step=1000 path=/s/ckpt.pt", Event{Kind: KindResume, Step: 1000, Epoch: NoValue, Path: "/s/ckpt.pt"}},
		{"isched1 resume step=0", Event{Kind: KindResume, Step: 0, Epoch: NoValue}},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			t.Parallel()
			got, err := ParseLine([]byte(tt.line))
			if err != nil {
				t.Fatalf("ParseLine: %v", err)
			}
			if !equalEvent(got, tt.want) {
				t.Errorf("ParseLine =\n%+v, want\n%+v", got, tt.want)
			}
		})
	}
}

func TestParseLineErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line    string
		wantKey string // "" for whole-line errors
		wantMsg string
		wantErr error
	}{
		{"", "", "missing isched version", ErrNotEvent},
		{"step=1", "", "missing isched version", ErrNotEvent},
		{"isched step=1", "", "missing isched version", ErrNotEvent},
		{"ISCHED1 step=1", "", "missing isched version", ErrNotEvent},
		{"isched2 step=1", "", "version", ErrVersion},
		{"isched1", "step", "required", nil},
		{"isched1 epoch=1", "step", "required", nil},
		{"isched1 ckpt step=1", "path", "required", nil},
		{"isched1 resume path=/x", "step", "required", nil},
		{"isched1 stp=1", "stp", "unknown key", nil},
		{"isched1 step=1 Loss=0.1", "Loss", "unknown key", nil},
		{"isched1 step=1 =3", "", "unknown key", nil},
		{"isched1 step=1 loss", "loss", "missing '='", nil},
		{"isched1 step=1 step=2", "step", "repeated", nil},
		{"isched1 step=-1", "step", "unsigned", nil},
		{"isched1 step=+1", "step", "unsigned", nil},
		{"isched1 step=1.0", "step", "unsigned", nil},
		{"isched1 step=", "step", "unsigned", nil},
		{"isched1 step=99999999999999999999", "step", "unsigned", nil},
		{"isched1 step=1 epoch=4294967296", "epoch", "out of range", nil},
		{"isched1 step=1 total=0", "total", "positive", nil},
		{"isched1 step=1 epochs=0", "epochs", "positive", nil},
		{"isched1 step=1 steps_per_epoch=0", "steps_per_epoch", "positive", nil},
		{"isched1 step=1 loss=abc", "loss", "not a float", nil},
		{"isched1 step=1 loss=0x1p-2", "loss", "not a float", nil},
		{"isched1 step=1 loss=1e999", "loss", "not a float", nil},
		{"isched1 step=1 t=0", "t", "positive finite", nil},
		{"isched1 step=1 t=-5", "t", "positive finite", nil},
		{"isched1 step=1 t=nan", "t", "positive finite", nil},
		{"isched1 step=1 path=/x", "path", "not allowed in a step line", nil},
		{"isched1 ckpt path=/x loss=0.1", "loss", "not allowed in a ckpt line", nil},
		{"isched1 resume step=1 total=5", "total", "not allowed in a resume line", nil},
		{"isched1 ckpt path=", "path", "empty", nil},
		{"isched1 ckpt path=/x%2", "path", "bad %-escape", nil},
		{"isched1 ckpt path=/x%zz", "path", "bad %-escape", nil},
		{"isched1 ckpt path=/x%00y", "path", "NUL", nil},
		{"isched1 ckpt path=/x\x01y", "path", "control character", nil},
		{"isched1 save path=/x", "", "unknown event kind", nil},
		{"isched1 step=1 " + strings.Repeat("x", MaxLineLen), "", "too long", nil},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			t.Parallel()
			_, err := ParseLine([]byte(tt.line))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseLine error = %v, want *ParseError", err)
			}
			if pe.Key != tt.wantKey || !strings.Contains(pe.Error(), tt.wantMsg) {
				t.Errorf("ParseLine error = %q (key %q), want key %q and message containing %q", err, pe.Key, tt.wantKey, tt.wantMsg)
			}
			if tt.wantKey != "" && !strings.Contains(err.Error(), `"`+tt.wantKey+`"`) {
				t.Errorf("error %q does not name the key", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
		})
	}
}

func TestParseLineQuotesBadValuesShortly(t *testing.T) {
	t.Parallel()
	_, err := ParseLine([]byte("isched1 step=" + strings.Repeat("9x", 1000)))
	if err == nil || len(err.Error()) > 120 {
		t.Errorf("error = %q, want a short error", err)
	}
}

func TestAppendLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ev   Event
		want string
	}{
		{Event{Kind: KindStep, Step: 0, Epoch: NoValue}, "isched1 step=0"},
		{Event{Kind: KindStep, Step: 450, Epoch: 3, Samples: 14400, Loss: f64(0.4123), LoopTime: 1732242000.123456,
			Total: 1000, Epochs: 10, StepsPerEpoch: 100},
			"isched1 step=450 epoch=3 samples=14400 loss=0.4123 t=1732242000.123456 total=1000 epochs=10 steps_per_epoch=100"},
		{Event{Kind: KindStep, Step: 1, Epoch: NoValue, NonFinite: true}, "isched1 step=1 loss=nan"},
		{Event{Kind: KindCkpt, Step: NoValue, Epoch: NoValue, Path: "/scratch/run 1/ep=3/cé.pt"},
			"isched1 ckpt path=/scratch/run%201/ep%3D3/c%C3%A9.pt"},
		{Event{Kind: KindCkpt, Step: 7, Epoch: 2, Path: "/a", LoopTime: 2.5}, "isched1 ckpt path=/a step=7 epoch=2 t=2.5"},
		{Event{Kind: KindResume, Step: 7, Epoch: NoValue, Path: "/a"}, "isched1 resume step=7 path=/a"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			b, err := appendLine([]byte("x"), tt.ev)
			if err != nil {
				t.Fatalf("AppendLine: %v", err)
			}
			if got := string(b); got != "x"+tt.want {
				t.Errorf("AppendLine = %q, want %q", got, "x"+tt.want)
			}
			back, err := ParseLine(b[1:])
			if err != nil || !equalEvent(back, tt.ev) {
				t.Errorf("ParseLine(AppendLine) = %+v, %v; want %+v", back, err, tt.ev)
			}
		})
	}
}

func TestAppendLineRejectsInvalid(t *testing.T) {
	t.Parallel()
	for name, ev := range map[string]Event{
		"no kind":       {Step: 1, Epoch: NoValue},
		"negative step": {Kind: KindStep, Step: -1, Epoch: NoValue},
		"ckpt no path":  {Kind: KindCkpt, Step: 1, Epoch: NoValue},
		"NaN loss":      {Kind: KindStep, Step: 1, Epoch: NoValue, Loss: f64(math.NaN())},
		"epoch -2":      {Kind: KindStep, Step: 1, Epoch: -2},
		"NUL path":      {Kind: KindCkpt, Step: 1, Epoch: NoValue, Path: "a\x00b"},
		"too long":      {Kind: KindCkpt, Step: 1, Epoch: NoValue, Path: strings.Repeat(" ", MaxLineLen)},
	} {
		if b, err := appendLine(nil, ev); err == nil {
			t.Errorf("%s: AppendLine = %q, want error", name, b)
		}
	}
}
