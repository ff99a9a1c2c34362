package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// TestServePprof: the address logged serves a heap profile (with gc=1,
// what the soak asks for) and the index; after close it is gone. Without
// an address nothing is served.
func TestServePprof(t *testing.T) {
	var logs bytes.Buffer
	stop, err := Flags{PprofListen: "127.0.0.1:0"}.ServePprof(slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Msg, Listen string }
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil || rec.Msg != "pprof" || rec.Listen == "" {
		t.Fatalf("log %q: want one record msg=pprof with its listen address (%v)", logs.String(), err)
	}
	for path, want := range map[string]string{"/debug/pprof/heap?gc=1&debug=1": "# HeapAlloc = ", "/debug/pprof/": "goroutine"} {
		resp, err := http.Get("http://" + rec.Listen + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s, body without %q", path, resp.Status, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + rec.Listen + "/debug/pprof/"); err == nil {
		t.Error("still serving after close")
	}
	if _, err := (Flags{PprofListen: "256.0.0.1:1"}).ServePprof(slog.New(slog.DiscardHandler)); err == nil {
		t.Error("ServePprof on a bad address succeeded")
	}
	logs.Reset()
	if stop, err := (Flags{}).ServePprof(slog.New(slog.NewJSONHandler(&logs, nil))); err != nil || stop() != nil || logs.Len() > 0 {
		t.Errorf("without an address: err %v, logged %q", err, logs.String())
	}
}
