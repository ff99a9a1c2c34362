package spool

import (
	"encoding/json"
	"fmt"
	"os"
)

// readSpool reads a spool file back.
func readSpool(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := spoolScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("spool %s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
