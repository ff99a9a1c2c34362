package relayproto

import (
	"strings"
	"testing"
)

// TestDecodeStrict: a frame is read exactly as it was written. A plain
// json decoder matches keys case-insensitively and lets the last of two
// duplicate keys win, so a frame could mean one thing to a reader that
// checks it and another to the relay.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string // want: "" decodes, else a part of the error
	}{
		{"plain", `{"v":1,"cred":"c"}`, ""},
		{"duplicate key", `{"v":1,"cred":"a","cred":"b"}`, `duplicate field "cred"`},
		{"case-folded key", `{"v":1,"Cred":"c"}`, `unknown field "Cred"`},
		{"unknown key", `{"v":1,"cred":"c","uid":0}`, `unknown field "uid"`},
		{"wrong type", `{"v":"1","cred":"c"}`, `wrong type (got string) "v"`},
		{"fraction", `{"v":1.5,"cred":"c"}`, "want an integer"},
		{"null string", `{"v":1,"cred":null}`, `wrong type (got null) "cred"`},
		{"two objects", `{"v":1,"cred":"c"}{}`, "data after the JSON object"},
		{"not JSON", `XADD`, "invalid character"},
		{"truncated", `{"v":1,`, "unexpected end"},
		{"not UTF-8", "{\"v\":1,\"cred\":\"\xff\"}", "not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var h Hello
			err := DecodeStrict([]byte(tc.in), &h)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want == "" && (h.V != 1 || h.Cred != "c"):
				t.Fatalf("decoded %+v", h)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
