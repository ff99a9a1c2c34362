package progress

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The encoder of the line format, for the tests: every event ParseLine
// accepts must be written back the same. The programs only parse lines;
// the trainers write them.

// appendEscapedPath escapes like Python's urllib.parse.quote(p, safe="/").
func appendEscapedPath(dst []byte, p string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(p); i++ {
		c := p[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '/' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&15])
	}
	return dst
}

// appendLine appends the canonical line for ev (without a newline) to dst.
// At and Source are not written. It fails for events ParseLine would reject.
func appendLine(dst []byte, ev Event) ([]byte, error) {
	if err := validate(ev); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, Version...)
	switch ev.Kind {
	case KindCkpt:
		dst = append(dst, " ckpt path="...)
		dst = appendEscapedPath(dst, ev.Path)
		if ev.Step != NoValue {
			dst = strconv.AppendInt(append(dst, " step="...), ev.Step, 10)
		}
	case KindResume:
		dst = strconv.AppendInt(append(dst, " resume step="...), ev.Step, 10)
		if ev.Path != "" {
			dst = appendEscapedPath(append(dst, " path="...), ev.Path)
		}
	default:
		dst = strconv.AppendInt(append(dst, " step="...), ev.Step, 10)
	}
	if ev.Epoch != NoValue {
		dst = strconv.AppendInt(append(dst, " epoch="...), int64(ev.Epoch), 10)
	}
	if ev.Kind == KindStep {
		if ev.Samples > 0 {
			dst = strconv.AppendInt(append(dst, " samples="...), ev.Samples, 10)
		}
		switch {
		case ev.Loss != nil:
			dst = strconv.AppendFloat(append(dst, " loss="...), *ev.Loss, 'g', -1, 64)
		case ev.NonFinite:
			dst = append(dst, " loss=nan"...)
		}
	}
	if ev.LoopTime > 0 {
		// Plain decimals for real clocks; 'g' keeps absurd values short.
		format := byte('f')
		if ev.LoopTime < 1 || ev.LoopTime >= 1e15 {
			format = 'g'
		}
		dst = strconv.AppendFloat(append(dst, " t="...), ev.LoopTime, format, -1, 64)
	}
	if ev.Kind == KindStep {
		if ev.Total > 0 {
			dst = strconv.AppendInt(append(dst, " total="...), ev.Total, 10)
		}
		if ev.Epochs > 0 {
			dst = strconv.AppendInt(append(dst, " epochs="...), int64(ev.Epochs), 10)
		}
		if ev.StepsPerEpoch > 0 {
			dst = strconv.AppendInt(append(dst, " steps_per_epoch="...), ev.StepsPerEpoch, 10)
		}
	}
	if n := len(dst) - start; n > MaxLineLen {
		return dst[:start], &ParseError{Msg: fmt.Sprintf("line too long (%d > %d bytes)", n, MaxLineLen)}
	}
	return dst, nil
}

func validate(ev Event) error {
	switch ev.Kind {
	case KindStep, KindResume:
		if ev.Step < 0 {
			return &ParseError{Key: "step", Msg: "required, >= 0"}
		}
	case KindCkpt:
		if ev.Path == "" {
			return &ParseError{Key: "path", Msg: "required in a ckpt line"}
		}
		if ev.Step < 0 && ev.Step != NoValue {
			return &ParseError{Key: "step", Msg: "negative"}
		}
	default:
		return &ParseError{Msg: fmt.Sprintf("unknown event kind %q", ev.Kind)}
	}
	if strings.IndexByte(ev.Path, 0) >= 0 {
		return &ParseError{Key: "path", Msg: "NUL in path"}
	}
	if ev.Epoch < 0 && ev.Epoch != NoValue {
		return &ParseError{Key: "epoch", Msg: "negative"}
	}
	if ev.Loss != nil && (math.IsNaN(*ev.Loss) || math.IsInf(*ev.Loss, 0)) {
		return &ParseError{Key: "loss", Msg: "not finite: use NonFinite"}
	}
	if math.IsNaN(ev.LoopTime) || math.IsInf(ev.LoopTime, 0) || ev.LoopTime < 0 {
		return &ParseError{Key: "t", Msg: "not a positive finite float"}
	}
	if ev.Epoch > math.MaxInt32 || ev.Epochs > math.MaxInt32 || ev.Epochs < 0 ||
		ev.Samples < 0 || ev.Total < 0 || ev.StepsPerEpoch < 0 {
		return &ParseError{Msg: "count out of range"}
	}
	return nil
}
